"""DgaSignals' loop over a flow's messages in Python: what `dga_signals.DgaSignals` does in C, for the tests.

`DgaSignalsReference` is `DgaSignals` with this loop in place of `dga_scan` (appliance/native/dns_windows.h);
windows, baselines and judges are the same code. tests/appliance/detection/test_dns_fast.py feeds both the
same flows and compares every detection and the state.
"""

from __future__ import annotations

from appliance.detection.analysis_config import AnalysisConfig
from appliance.detection.dpi.dga_signals import _NS, DgaSignals, Scanned, _AgentFailures
from appliance.model import FlowRecord

# NXDOMAIN only: a resolver outage answers SERVFAIL for every name of every host, which is no DGA.
_FAILED_RCODES = frozenset({3})
_LOCAL_SUFFIXES = ("arpa", "local", "lan", "internal", "localdomain", "home")


class DgaSignalsReference(DgaSignals):
    """`DgaSignals` with its per-message loop in Python (the twin of `dga_scan`)."""

    def _scan(self, flow: FlowRecord, config: AnalysisConfig) -> Scanned:
        c = config.dga
        agent_id = flow.agent_id
        state = self._agents.get(agent_id)
        if state is None:
            if len(self._agents) >= self._max_agents:
                self._agents.clear()
            state = self._agents[agent_id] = _AgentFailures(window_start=flow.first_ns)
        failed_any = False
        now_ns = flow.first_ns
        last_registered = ""
        split = self._domains.split
        for message in flow.dns:
            name = message.qname
            if not name:
                continue
            ts = message.timestamp_ns or flow.last_ns
            if ts > now_ns:
                now_ns = ts
            if message.is_response:
                state.answers += 1
                if message.rcode in _FAILED_RCODES:
                    state.failures += 1
                    if "." not in name or name.endswith(_LOCAL_SUFFIXES):
                        continue
                    registered, label = split(name)
                    failed = state.failed
                    failed.pop(registered, None)  # re-insert: insertion order stays time order
                    failed[registered] = (ts, label)
                    if len(failed) > self._max_per_agent:
                        del failed[next(iter(failed))]
                    failed_any = True
                elif message.answers:
                    state.ttls.append(message.answers[0].ttl)
                continue
            if "." not in name or name.endswith(_LOCAL_SUFFIXES):
                continue
            registered = split(name)[0]
            if registered != last_registered:  # a flow's many names under one domain count once
                last_registered = registered
                self._count_asker(registered, agent_id, ts, c.common_domain_agents, c.prevalence_window_s)
        return state, now_ns, now_ns - state.window_start >= int(c.burst_window_s * _NS), failed_any

    def _count_asker(self, registered: str, agent_id: str, ts: int, cap: int, window_s: float) -> None:
        entry = self._askers.get(registered)
        if entry is None or ts - entry[0] > window_s * _NS:
            if len(self._askers) >= self._max_domains:
                self._askers.clear()
            self._askers[registered] = [ts, {agent_id}]
            return
        if ts > entry[0]:
            entry[0] = ts
        agents = entry[1]
        if len(agents) < cap:
            agents.add(agent_id)
