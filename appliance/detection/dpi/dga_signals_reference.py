"""DgaSignals' loop over a flow's messages in Python: what `dga_signals.DgaSignals` does in C, for the tests.

`DgaSignalsReference` is `DgaSignals` as it was before its loop moved to C: this loop in place of `dga_scan`
(appliance/native/dns_windows.h), the judge as it was (it shaped every label before the throttle decided) and
the count of unknown failures when a window closes in Python; the baselines are the same code.
tests/appliance/detection/test_dns_fast.py feeds both the same flows and compares every detection and the state.
"""

from __future__ import annotations

from appliance.detection.analysis_config import AnalysisConfig
from appliance.detection.detections import make_detection
from appliance.detection.dpi.dga import ramp
from appliance.detection.dpi.dga_signals import _NS, DgaSignals, Scanned, _AgentFailures
from appliance.detection.dpi.flow_scan import ScannedInPython
from appliance.model import Category, Detection, FlowRecord, Severity, ip_str

# NXDOMAIN only: a resolver outage answers SERVFAIL for every name of every host, which is no DGA.
_FAILED_RCODES = frozenset({3})
_LOCAL_SUFFIXES = ("arpa", "local", "lan", "internal", "localdomain", "home")


class DgaSignalsReference(ScannedInPython, DgaSignals):
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

    def _unknown_in_window(self, state: _AgentFailures, cap: int) -> int:
        return sum(1 for d, (ts, _) in state.failed.items() if ts >= state.window_start and not self._is_common(d, cap))

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

    # -- the judge as it was: every shape computed before the throttle decides ------------------------
    def _judge(self, flow: FlowRecord, state: _AgentFailures, now_ns: int, config: AnalysisConfig) -> list[Detection]:
        c = config.dga
        window_ns = int(c.burst_window_s * _NS)
        failed = state.failed
        horizon = now_ns - window_ns
        while failed:
            first = next(iter(failed))
            if failed[first][0] >= horizon:
                break
            del failed[first]
        unknown = [(d, label) for d, (_, label) in failed.items() if not self._is_common(d, c.common_domain_agents)]
        count = len(unknown)
        if count < min(c.burst_min_domains, c.lexical_min_domains):
            return []
        threshold = max(float(c.burst_min_domains), c.burst_baseline_factor * state.baseline)
        share = state.failures / state.answers if state.answers else 0.0
        resolver = ip_str(flow.remote_ip)
        interval = config.detectors.report_interval_s
        common = dict(agent_id=flow.agent_id, indicator=resolver, protocol="dns", transport="udp",
                      flow_ids=[flow.flow_id], first_ns=max(horizon, failed[next(iter(failed))][0]),
                      last_ns=now_ns, remote_ip=resolver)
        out: list[Detection] = []
        if count >= threshold and self._throttle.allow(("nx_burst", flow.agent_id, resolver), now_ns, interval):
            evidence = {"unresolved_unknown_domains": count, "unresolved_domains": len(failed),
                        "baseline_per_window": round(state.baseline, 2), "baseline_windows": state.windows,
                        "nxdomain_share": round(share, 2), "previous_window_nxdomain_share": round(state.last_share, 2),
                        "population_nxdomain_share": round(self._population_share, 3),
                        "population_windows": self._population_windows,
                        "window_s": c.burst_window_s, "resolver": resolver,
                        "resolved_ttl_median": sorted(state.ttls)[len(state.ttls) // 2] if state.ttls else None,
                        "sample_domains": [d for d, _ in unknown[-8:]],
                        "reason": f"{count} never-seen registered domains failed to resolve within {c.burst_window_s:.0f} s"}
            # Failing far more often than the other hosts do is a little more evidence.
            above_population = self._population_windows >= 10 and share >= 3 * max(self._population_share, 0.02)
            confidence = 0.45 + 0.3 * ramp(count, c.burst_min_domains, 4 * c.burst_min_domains) + (0.1 if above_population else 0.0)
            out.append(make_detection("dpi.dns.nx_burst", Category.DGA, confidence, Severity.MEDIUM,
                                      evidence=evidence, **common))  # type: ignore[arg-type]
        if count >= c.lexical_min_domains:
            shapes = [self._words.shape(label) for _, label in unknown]
            made = [s for s in shapes if s.kind]
            share = len(made) / count
            if len(made) >= c.lexical_min_domains and share >= c.lexical_min_share and \
                    self._throttle.allow(("dga_lexical", flow.agent_id, resolver), now_ns, interval):
                out.append(self._lexical(made, share, count, c.lexical_min_domains, c.burst_window_s, common))
        return out
