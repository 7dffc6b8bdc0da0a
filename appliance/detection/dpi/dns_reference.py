"""The DNS detectors' per-message accounting in Python: what `dns.DnsAnalyzer` does in C, for the tests.

`DnsAnalyzerReference` is `DnsAnalyzer` with this loop and these dataclasses in place of
appliance/native/dns_windows.h; the judges (evidence, confidences, throttling) are the same code. The
differential tests (tests/appliance/detection/test_dns_fast.py) feed both the same flows and compare every
detection.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from appliance.detection.analysis_config import AnalysisConfig
from appliance.detection.dpi.dga import shannon_entropy
from appliance.detection.dpi.dns import _NS, DnsAnalyzer, Scanned
from appliance.model import DnsMessage, FlowRecord

_SUSPICIOUS_QTYPES = frozenset({16, 10, 5})  # TXT, NULL, CNAME: the record types tunnels favour
_NXDOMAIN = 3
_LOCAL_SUFFIXES = ("arpa", "local", "lan", "internal", "localdomain", "home")


@dataclass(slots=True)
class _DomainWindow:
    """Queries under one registered domain by one agent, inside the window."""

    events: deque[tuple[int, str, int, float, bool]] = field(default_factory=deque)  # ts, sub, len, entropy, susp qtype
    subdomains: dict[str, int] = field(default_factory=dict)  # unique subdomain -> occurrences in window
    length_sum: int = 0
    entropy_sum: float = 0.0
    suspicious_qtypes: int = 0
    unique_bytes: int = 0
    flow_ids: deque[str] = field(default_factory=lambda: deque(maxlen=20))
    first_ns: int = 0

    @property
    def queries(self) -> int:
        return len(self.events)

    @property
    def first_event_ns(self) -> int:
        return self.events[0][0]


@dataclass(slots=True)
class _AgentDns:
    """Per-agent DNS state: registered domains seen (DGA), answers (NXDOMAIN ratio), query-rate buckets."""

    domains: dict[str, tuple[int, float]] = field(default_factory=dict)  # registered -> (last seen ns, score)
    suspicious: int = 0  # domains whose score is at or above `threshold`, kept as they come and go
    threshold: float = -1.0
    responses: deque[tuple[int, bool]] = field(default_factory=deque)  # (ts, is NXDOMAIN)
    nx_count: int = 0
    buckets: dict[int, int] = field(default_factory=dict)
    top_bucket: int = -1
    base_n: int = 0
    base_mean: float = 0.0
    base_m2: float = 0.0
    flow_ids: deque[str] = field(default_factory=lambda: deque(maxlen=20))

    @property
    def answered(self) -> int:
        return len(self.responses)


class DnsAnalyzerReference(DnsAnalyzer):
    """`DnsAnalyzer` with its per-message accounting in Python (the twin of dns_windows.h)."""

    def _scan(self, flow: FlowRecord, config: AnalysisConfig) -> Scanned:
        agent_id = flow.agent_id
        agent = self._agents.get(agent_id)  # type: ignore[assignment]
        if agent is None:
            if len(self._agents) >= self._max_keys:
                self._agents.clear()
            agent = self._agents[agent_id] = _AgentDns()  # type: ignore[assignment]
        agent.flow_ids.append(flow.flow_id)
        touched: dict[str, _DomainWindow] = {}
        tun = config.dns_tunneling
        tun_window_ns = int(tun.window_s * _NS)
        queries = 0
        now_ns = flow.first_ns
        for message in flow.dns:
            ts = message.timestamp_ns or flow.last_ns
            if ts > now_ns:
                now_ns = ts
            if message.is_response:
                self._count_response(agent, message, ts, config)
                continue
            name = message.qname
            if not name or name.endswith(_LOCAL_SUFFIXES) or "." not in name:
                continue
            queries += 1
            registered, label = self._domains.split(name)
            window = self._windows.get((agent_id, registered))  # type: ignore[arg-type]
            if window is None:
                if len(self._windows) >= self._max_keys:
                    self._windows.clear()
                window = self._windows[(agent_id, registered)] = _DomainWindow(first_ns=ts)
            self._add_query(window, name, registered, message.qtype, ts, tun_window_ns)
            if flow.flow_id not in window.flow_ids:
                window.flow_ids.append(flow.flow_id)
            touched[registered] = window
            if not label.startswith("xn--"):
                self._remember_domain(agent, registered, ts, self._scorer.score(label), config.dga.name_threshold)
        # The flood counter uses the flow's packet count: a flow keeps only its first DNS messages.
        if flow.packets_out:
            self._count_queries(agent, flow, config)
            queries = max(queries, 1)
        return agent, queries, now_ns, list(touched.items()), True, True

    def _add_query(self, window: _DomainWindow, name: str, registered: str, qtype: int, ts: int, window_ns: int) -> None:
        sub = name[: -len(registered) - 1] if len(name) > len(registered) else ""
        flat = sub.replace(".", "")
        entropy = shannon_entropy(flat) if flat else 0.0
        suspicious = qtype in _SUSPICIOUS_QTYPES
        events = window.events
        events.append((ts, sub, len(flat), entropy, suspicious))
        window.length_sum += len(flat)
        window.entropy_sum += entropy
        window.suspicious_qtypes += suspicious
        if sub:
            seen = window.subdomains.get(sub, 0)
            window.subdomains[sub] = seen + 1
            if not seen:
                window.unique_bytes += len(name)
        horizon = ts - window_ns
        while events and (events[0][0] < horizon or len(events) > self._max_events):
            old_ts, old_sub, old_len, old_entropy, old_susp = events.popleft()
            window.length_sum -= old_len
            window.entropy_sum -= old_entropy
            window.suspicious_qtypes -= old_susp
            if old_sub:
                left = window.subdomains[old_sub] - 1
                if left:
                    window.subdomains[old_sub] = left
                else:
                    del window.subdomains[old_sub]
                    window.unique_bytes -= len(old_sub) + len(registered) + 1

    @staticmethod
    def _remember_domain(agent: _AgentDns, registered: str, ts: int, score: float, threshold: float) -> None:
        if threshold != agent.threshold:  # first use, or the threshold was reconfigured: recount
            agent.threshold = threshold
            agent.suspicious = sum(1 for _, old in agent.domains.values() if old >= threshold)
        previous = agent.domains.pop(registered, None)
        if previous is not None and previous[1] >= threshold:
            agent.suspicious -= 1
        agent.domains[registered] = (ts, score)
        if score >= threshold:
            agent.suspicious += 1

    def _count_response(self, agent: _AgentDns, message: DnsMessage, ts: int, config: AnalysisConfig) -> None:
        is_nx = message.rcode == _NXDOMAIN
        agent.responses.append((ts, is_nx))
        agent.nx_count += is_nx
        horizon = ts - int(config.dga.window_s * _NS)
        responses = agent.responses
        while responses and (responses[0][0] < horizon or len(responses) > self._max_events):
            agent.nx_count -= responses.popleft()[1]

    def _count_queries(self, agent: _AgentDns, flow: FlowRecord, config: AnalysisConfig) -> None:
        bucket_ns = int(config.dns_flood.bucket_s * _NS)
        first, last = flow.first_ns // bucket_ns, flow.last_ns // bucket_ns
        spans = last - first + 1
        if spans > 360:  # a flow longer than an hour of buckets: count it in its last hour
            first, spans = last - 359, 360
        share, extra = divmod(flow.packets_out, spans)
        for i in range(spans):
            agent.buckets[first + i] = agent.buckets.get(first + i, 0) + share + (1 if i < extra else 0)
        index = last
        if index > agent.top_bucket:
            if agent.top_bucket >= 0:
                # Close every bucket older than the two newest into the baseline (zeros included,
                # capped, so a quiet hour does not flatten the baseline to nothing).
                zeros = min(max(index - agent.top_bucket - 1, 0), 30)
                for _ in range(zeros):
                    self._baseline_add(agent, 0.0)
            agent.top_bucket = index
            for old in [b for b in agent.buckets if b < index - 2]:
                count = agent.buckets.pop(old)
                rate = count / config.dns_flood.bucket_s
                if rate < config.dns_flood.absolute_qps:  # an alarm bucket does not teach the baseline
                    self._baseline_add(agent, rate)

    @staticmethod
    def _baseline_add(agent: _AgentDns, value: float) -> None:
        agent.base_n += 1
        delta = value - agent.base_mean
        agent.base_mean += delta / agent.base_n
        agent.base_m2 += delta * (value - agent.base_mean)
