"""The DNS detectors' per-message accounting in Python: what `dns.DnsAnalyzer` does in C, for the tests.

`DnsAnalyzerReference` is `DnsAnalyzer` as it was before its accounting moved to C: this loop and these
dataclasses in place of appliance/native/dns_windows.h, and the judges as they were (they built the evidence
before the throttle decided; `DnsAnalyzer`'s ask the throttle first). The differential tests
(tests/appliance/detection/test_dns_fast.py) feed both the same flows and compare every detection.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from appliance.detection.analysis_config import AnalysisConfig
from appliance.detection.detections import make_detection
from appliance.detection.dpi.dga import ramp, shannon_entropy
from appliance.detection.dpi.dns import _NS, DnsAnalyzer, Scanned
from appliance.detection.dpi.flow_scan import ScannedInPython
from appliance.model import Category, Detection, DnsMessage, FlowRecord, Severity, ip_str

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


class DnsAnalyzerReference(ScannedInPython, DnsAnalyzer):
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

    # -- the judges as they were: evidence built before the throttle decides -----------------------
    def _judge_tunneling(self, flow: FlowRecord, registered: str, w: _DomainWindow, now_ns: int,
                         config: AnalysisConfig) -> list[Detection]:
        c = config.dns_tunneling
        n = len(w.events)
        if n < c.min_queries:
            return []
        unique = len(w.subdomains)
        mean_len = w.length_sum / n
        mean_entropy = w.entropy_sum / n
        qtype_share = w.suspicious_qtypes / n
        # Decide first: most flows raise nothing, and the evidence below costs more than the test.
        by_names = mean_len >= c.min_mean_subdomain_length and mean_entropy >= c.min_label_entropy and unique >= c.min_unique_subdomains
        by_volume = unique >= c.min_unique_subdomains and w.unique_bytes >= c.min_name_bytes and mean_len >= c.min_mean_subdomain_length / 2
        if not (by_names or by_volume):
            return []
        evidence = {
            "registered_domain": registered, "queries": n, "unique_subdomains": unique,
            "mean_subdomain_length": round(mean_len, 1), "mean_label_entropy": round(mean_entropy, 2),
            "unique_name_bytes": w.unique_bytes, "txt_null_cname_share": round(qtype_share, 2),
            "window_s": c.window_s, "sample_names": [s + "." + registered for s in list(w.subdomains)[-3:]],
        }
        out = []
        interval = config.detectors.report_interval_s
        common = dict(agent_id=flow.agent_id, indicator=registered, protocol="dns", transport="udp",
                      flow_ids=list(w.flow_ids), first_ns=w.events[0][0], last_ns=now_ns,
                      remote_ip=ip_str(flow.remote_ip), domain=registered)
        if by_names:
            if self._throttle.allow(("tun_names", flow.agent_id, registered), now_ns, interval):
                confidence = (0.45 + 0.25 * ramp(mean_len, c.min_mean_subdomain_length, 3 * c.min_mean_subdomain_length)
                              + 0.2 * ramp(mean_entropy, c.min_label_entropy, 4.5)
                              + (0.1 if qtype_share >= c.suspicious_qtype_share else 0.0))
                reason = (f"{unique} unique subdomains of {registered} averaging {mean_len:.0f} characters "
                          f"at {mean_entropy:.1f} bits/char")
                out.append(make_detection("dpi.dns.tunnel_names", Category.DNS_TUNNELING, confidence, Severity.HIGH,
                                          evidence={**evidence, "reason": reason}, **common))  # type: ignore[arg-type]
        if by_volume:
            if self._throttle.allow(("tun_volume", flow.agent_id, registered), now_ns, interval):
                confidence = (0.4 + 0.35 * ramp(w.unique_bytes, c.min_name_bytes, 10 * c.min_name_bytes)
                              + 0.15 * ramp(unique, c.min_unique_subdomains, 10 * c.min_unique_subdomains)
                              + (0.1 if qtype_share >= c.suspicious_qtype_share else 0.0))
                reason = f"{w.unique_bytes} bytes of unique query names to {registered} within {c.window_s:.0f} s"
                out.append(make_detection("dpi.dns.tunnel_volume", Category.DNS_TUNNELING, confidence, Severity.HIGH,
                                          evidence={**evidence, "reason": reason}, **common))  # type: ignore[arg-type]
        return out

    def _judge_dga(self, flow: FlowRecord, agent: _AgentDns, resolver: str, now_ns: int,
                   config: AnalysisConfig) -> list[Detection]:
        c = config.dga
        horizon = now_ns - int(c.window_s * _NS)
        domains = agent.domains
        while domains:
            first = next(iter(domains))
            seen, score = domains[first]
            if seen >= horizon:
                break
            del domains[first]
            if score >= agent.threshold:
                agent.suspicious -= 1
        if agent.threshold != c.name_threshold:
            agent.threshold = c.name_threshold
            agent.suspicious = sum(1 for _, score in domains.values() if score >= c.name_threshold)
        total = len(domains)
        answered = len(agent.responses)
        nx_ratio = agent.nx_count / answered if answered else 0.0
        out: list[Detection] = []
        # The running count decides; the list (for evidence) is built only when it may matter.
        if agent.suspicious < c.min_suspicious_domains / 2:
            return out
        suspicious = [(d, s) for d, (_, s) in domains.items() if s >= c.name_threshold]
        share = len(suspicious) / total if total else 0.0
        evidence = {
            "suspicious_domains": len(suspicious), "domains_in_window": total, "suspicious_share": round(share, 2),
            "mean_score": round(sum(s for _, s in suspicious) / len(suspicious), 2),
            "nxdomain_ratio": round(nx_ratio, 2), "responses": answered, "resolver": resolver,
            "sample_domains": [d for d, _ in suspicious[-8:]], "window_s": c.window_s,
        }
        interval = config.detectors.report_interval_s
        common = dict(agent_id=flow.agent_id, indicator=resolver, protocol="dns", transport="udp",
                      flow_ids=list(agent.flow_ids), first_ns=max(horizon, flow.first_ns - int(c.window_s * _NS)),
                      last_ns=now_ns, remote_ip=resolver)
        if len(suspicious) >= c.min_suspicious_domains and share >= c.min_suspicious_share:
            if self._throttle.allow(("dga", flow.agent_id, resolver), now_ns, interval):
                confidence = 0.5 + 0.3 * ramp(len(suspicious), c.min_suspicious_domains, 4 * c.min_suspicious_domains) \
                    + 0.2 * ramp(evidence["mean_score"], c.name_threshold, 0.9)  # type: ignore[arg-type]
                reason = f"{len(suspicious)} algorithmically generated-looking domains in {c.window_s:.0f} s"
                out.append(make_detection("dpi.dns.dga", Category.DGA, confidence, Severity.HIGH,
                                          evidence={**evidence, "reason": reason}, **common))  # type: ignore[arg-type]
        if answered >= c.nxdomain_min_responses and nx_ratio >= c.nxdomain_ratio:
            if self._throttle.allow(("nx", flow.agent_id, resolver), now_ns, interval):
                confidence = 0.35 + 0.4 * ramp(nx_ratio, c.nxdomain_ratio, 0.95)
                reason = f"{nx_ratio:.0%} of {answered} answers were NXDOMAIN"
                out.append(make_detection("dpi.dns.nxdomain", Category.DGA, confidence, Severity.MEDIUM,
                                          evidence={**evidence, "reason": reason}, **common))  # type: ignore[arg-type]
        return out

    def _judge_flood(self, flow: FlowRecord, agent: _AgentDns, resolver: str, now_ns: int,
                     config: AnalysisConfig) -> list[Detection]:
        c = config.dns_flood
        if agent.top_bucket < 0:
            return []
        count = agent.buckets.get(agent.top_bucket, 0)
        # The newest bucket may have just opened: judge the fuller of the two newest.
        count = max(count, agent.buckets.get(agent.top_bucket - 1, 0))
        rate = count / c.bucket_s
        std = math.sqrt(agent.base_m2 / (agent.base_n - 1)) if agent.base_n > 1 else 0.0
        z = (rate - agent.base_mean) / max(std, 1.0)
        warm = agent.base_n >= c.warmup_buckets
        if rate < c.absolute_qps and not (warm and rate >= c.baseline_min_qps and z >= c.baseline_z):
            return []
        evidence = {"queries_per_s": round(rate, 1), "bucket_s": c.bucket_s, "baseline_mean_qps": round(agent.base_mean, 2),
                    "baseline_std_qps": round(std, 2), "baseline_buckets": agent.base_n, "z_score": round(z, 1),
                    "absolute_qps": c.absolute_qps, "resolver": resolver}
        interval = config.detectors.report_interval_s
        common = dict(agent_id=flow.agent_id, indicator=resolver, protocol="dns", transport="udp",
                      flow_ids=list(agent.flow_ids), first_ns=agent.top_bucket * int(c.bucket_s * _NS),
                      last_ns=now_ns, remote_ip=resolver)
        out: list[Detection] = []
        if rate >= c.absolute_qps and self._throttle.allow(("flood_abs", flow.agent_id, resolver), now_ns, interval):
            confidence = 0.55 + 0.4 * ramp(rate, c.absolute_qps, 5 * c.absolute_qps)
            reason = f"{rate:.0f} queries/s, above the {c.absolute_qps:.0f}/s ceiling"
            out.append(make_detection("dpi.dns.flood_rate", Category.DNS_FLOOD, confidence, Severity.HIGH,
                                      evidence={**evidence, "reason": reason}, **common))  # type: ignore[arg-type]
        if warm and rate >= c.baseline_min_qps and z >= c.baseline_z and \
                self._throttle.allow(("flood_z", flow.agent_id, resolver), now_ns, interval):
            confidence = 0.45 + 0.4 * ramp(z, c.baseline_z, 4 * c.baseline_z)
            reason = f"{rate:.0f} queries/s is {z:.0f} standard deviations above this agent's baseline"
            out.append(make_detection("dpi.dns.flood_baseline", Category.DNS_FLOOD, confidence, Severity.MEDIUM,
                                      evidence={**evidence, "reason": reason}, **common))  # type: ignore[arg-type]
        return out
