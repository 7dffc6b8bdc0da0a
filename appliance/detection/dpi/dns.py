"""DNS analysis over sliding windows of event time: tunneling, domain generation, flood.

Scored per (agent, registered domain) for tunneling and per agent for DGA and flood, never per
packet: one odd name is nothing, a window full of them is a signal. Each windowed detector
re-reports a key at most once per `detectors.report_interval_s`, so a sustained behaviour gives
the correlator the second, independent-in-time detection it needs to raise an alert.
"""

from __future__ import annotations

import math
from typing import Any

from appliance.detection.analysis_config import AnalysisConfig
from appliance.detection.detections import Throttle, make_detection
from appliance.detection.domains import RegisteredDomains
from appliance.detection.dpi.dga import NameScorer, ramp
from appliance.detection.dpi.flow_scan import ScannedAnalyzer
from appliance.model import Category, Detection, FlowRecord, Severity, ip_str
from appliance.native.dpi import AgentDns, DnsScanner, DomainWindow

# (agent, queries, newest timestamp, [(registered, window)] the tunneling judge may report or None, DGA judge due, flood
# judge due): the scan runs each judge's first tests (the same arithmetic), so a judge runs only when it may report.
Scanned = tuple[Any, int, int, "list[tuple[str, Any]] | None", bool, bool]

_NS = 1_000_000_000
_MAX_KEYS = 100_000
_MAX_EVENTS_PER_KEY = 4096


class DnsAnalyzer(ScannedAnalyzer):
    """Tunneling, DGA and flood detectors on the DNS messages of finished flows.

    The per-message accounting (windows per agent and registered domain, the agent's answers and scored
    domains) is one C call per flow (appliance/native/dns_windows.h); its Python twin,
    `dns_reference.DnsAnalyzerReference`, is what the tests hold it to (it keeps the judges as they were).
    """

    _skipped_event = "dns_flow_skipped"

    def __init__(self, domains: RegisteredDomains, scorer: NameScorer, max_keys: int = _MAX_KEYS,
                 max_events: int = _MAX_EVENTS_PER_KEY) -> None:
        super().__init__()
        self._domains = domains
        self._scorer = scorer
        self._max_keys = max_keys  # agents, and (agent, registered domain) windows
        self._max_events = max_events  # queries per window, answers per agent
        self._windows: dict[tuple[str, str], DomainWindow] = {}
        self._agents: dict[str, AgentDns] = {}
        self._throttle = Throttle()
        self._scanner = DnsScanner(self._agents, self._windows, domains.memo, domains.split, scorer.memo, scorer.score,
                                   max_keys, max_events)

    def analyze(self, flow: FlowRecord, config: AnalysisConfig) -> list[Detection]:
        if not flow.dns or flow.remote_port != 53:
            return []
        self.configure(config)
        scanned = self.scan(flow)
        return [] if scanned is None else self.judge(flow, scanned, config)

    # -- accounting ---------------------------------------------------------------------------
    def _configure_scanner(self, config: AnalysisConfig) -> None:
        t, g, f = config.dns_tunneling, config.dga, config.dns_flood
        self._scanner.configure(int(t.window_s * _NS), t.min_queries, g.name_threshold, int(g.window_s * _NS),
                                g.min_suspicious_domains, int(f.bucket_s * _NS), f.bucket_s, f.absolute_qps,
                                f.baseline_min_qps, f.baseline_z, f.warmup_buckets, t.min_unique_subdomains,
                                t.min_mean_subdomain_length, t.min_label_entropy, t.min_name_bytes,
                                g.min_suspicious_share, g.nxdomain_min_responses, g.nxdomain_ratio)

    # -- judgement ----------------------------------------------------------------------------
    def judge(self, flow: FlowRecord, scanned: Scanned, config: AnalysisConfig) -> list[Detection]:
        """What the judges the scan found due report for this flow (a list of its own)."""
        agent, queries, now_ns, judged, dga_due, flood_due = scanned
        out: list[Detection] = []
        resolver = ip_str(flow.remote_ip)
        for registered, window in judged or ():
            out.extend(self._judge_tunneling(flow, registered, window, now_ns, config))
        if queries:
            if dga_due:
                out.extend(self._judge_dga(flow, agent, resolver, now_ns, config))
            if flood_due:
                out.extend(self._judge_flood(flow, agent, resolver, now_ns, config))
        return out

    def _judge_tunneling(self, flow: FlowRecord, registered: str, w: DomainWindow, now_ns: int,
                         config: AnalysisConfig) -> list[Detection]:
        c = config.dns_tunneling
        n = w.queries
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
        # The throttle next (in the same order as ever), the evidence only for what will be reported.
        interval = config.detectors.report_interval_s
        names_due = by_names and self._throttle.allow(("tun_names", flow.agent_id, registered), now_ns, interval)
        volume_due = by_volume and self._throttle.allow(("tun_volume", flow.agent_id, registered), now_ns, interval)
        if not (names_due or volume_due):
            return []
        evidence = {
            "registered_domain": registered, "queries": n, "unique_subdomains": unique,
            "mean_subdomain_length": round(mean_len, 1), "mean_label_entropy": round(mean_entropy, 2),
            "unique_name_bytes": w.unique_bytes, "txt_null_cname_share": round(qtype_share, 2),
            "window_s": c.window_s, "sample_names": [s + "." + registered for s in list(w.subdomains)[-3:]],
        }
        out = []
        common = dict(agent_id=flow.agent_id, indicator=registered, protocol="dns", transport="udp",
                      flow_ids=list(w.flow_ids), first_ns=w.first_event_ns, last_ns=now_ns,
                      remote_ip=ip_str(flow.remote_ip), domain=registered)
        if names_due:
            confidence = (0.45 + 0.25 * ramp(mean_len, c.min_mean_subdomain_length, 3 * c.min_mean_subdomain_length)
                          + 0.2 * ramp(mean_entropy, c.min_label_entropy, 4.5)
                          + (0.1 if qtype_share >= c.suspicious_qtype_share else 0.0))
            reason = (f"{unique} unique subdomains of {registered} averaging {mean_len:.0f} characters "
                      f"at {mean_entropy:.1f} bits/char")
            out.append(make_detection("dpi.dns.tunnel_names", Category.DNS_TUNNELING, confidence, Severity.HIGH,
                                      evidence={**evidence, "reason": reason}, **common))  # type: ignore[arg-type]
        if volume_due:
            confidence = (0.4 + 0.35 * ramp(w.unique_bytes, c.min_name_bytes, 10 * c.min_name_bytes)
                          + 0.15 * ramp(unique, c.min_unique_subdomains, 10 * c.min_unique_subdomains)
                          + (0.1 if qtype_share >= c.suspicious_qtype_share else 0.0))
            reason = f"{w.unique_bytes} bytes of unique query names to {registered} within {c.window_s:.0f} s"
            out.append(make_detection("dpi.dns.tunnel_volume", Category.DNS_TUNNELING, confidence, Severity.HIGH,
                                      evidence={**evidence, "reason": reason}, **common))  # type: ignore[arg-type]
        return out

    def _judge_dga(self, flow: FlowRecord, agent: AgentDns, resolver: str, now_ns: int,
                   config: AnalysisConfig) -> list[Detection]:
        c = config.dga
        horizon = now_ns - int(c.window_s * _NS)
        domains = agent.domains  # the scan has let domains older than the window go and counted against this threshold
        total = len(domains)
        answered = agent.answered
        nx_ratio = agent.nx_count / answered if answered else 0.0
        out: list[Detection] = []
        # The running count decides (the scan keeps it against this threshold); the list, for the evidence, is built
        # only for what will be reported.
        count = agent.suspicious
        if count < c.min_suspicious_domains / 2:
            return out
        share = count / total if total else 0.0
        interval = config.detectors.report_interval_s
        dga_due = count >= c.min_suspicious_domains and share >= c.min_suspicious_share and \
            self._throttle.allow(("dga", flow.agent_id, resolver), now_ns, interval)
        nx_due = answered >= c.nxdomain_min_responses and nx_ratio >= c.nxdomain_ratio and \
            self._throttle.allow(("nx", flow.agent_id, resolver), now_ns, interval)
        if not (dga_due or nx_due):
            return out
        suspicious = [(d, s) for d, (_, s) in domains.items() if s >= c.name_threshold]
        evidence = {
            "suspicious_domains": len(suspicious), "domains_in_window": total, "suspicious_share": round(share, 2),
            "mean_score": round(sum(s for _, s in suspicious) / len(suspicious), 2),
            "nxdomain_ratio": round(nx_ratio, 2), "responses": answered, "resolver": resolver,
            "sample_domains": [d for d, _ in suspicious[-8:]], "window_s": c.window_s,
        }
        common = dict(agent_id=flow.agent_id, indicator=resolver, protocol="dns", transport="udp",
                      flow_ids=list(agent.flow_ids), first_ns=max(horizon, flow.first_ns - int(c.window_s * _NS)),
                      last_ns=now_ns, remote_ip=resolver)
        if dga_due:
            confidence = 0.5 + 0.3 * ramp(len(suspicious), c.min_suspicious_domains, 4 * c.min_suspicious_domains) \
                + 0.2 * ramp(evidence["mean_score"], c.name_threshold, 0.9)  # type: ignore[arg-type]
            reason = f"{len(suspicious)} algorithmically generated-looking domains in {c.window_s:.0f} s"
            out.append(make_detection("dpi.dns.dga", Category.DGA, confidence, Severity.HIGH,
                                      evidence={**evidence, "reason": reason}, **common))  # type: ignore[arg-type]
        if nx_due:
            confidence = 0.35 + 0.4 * ramp(nx_ratio, c.nxdomain_ratio, 0.95)
            reason = f"{nx_ratio:.0%} of {answered} answers were NXDOMAIN"
            out.append(make_detection("dpi.dns.nxdomain", Category.DGA, confidence, Severity.MEDIUM,
                                      evidence={**evidence, "reason": reason}, **common))  # type: ignore[arg-type]
        return out

    def _judge_flood(self, flow: FlowRecord, agent: AgentDns, resolver: str, now_ns: int,
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
        interval = config.detectors.report_interval_s
        rate_due = rate >= c.absolute_qps and self._throttle.allow(("flood_abs", flow.agent_id, resolver), now_ns, interval)
        z_due = warm and rate >= c.baseline_min_qps and z >= c.baseline_z and \
            self._throttle.allow(("flood_z", flow.agent_id, resolver), now_ns, interval)
        if not (rate_due or z_due):
            return []
        evidence = {"queries_per_s": round(rate, 1), "bucket_s": c.bucket_s, "baseline_mean_qps": round(agent.base_mean, 2),
                    "baseline_std_qps": round(std, 2), "baseline_buckets": agent.base_n, "z_score": round(z, 1),
                    "absolute_qps": c.absolute_qps, "resolver": resolver}
        common = dict(agent_id=flow.agent_id, indicator=resolver, protocol="dns", transport="udp",
                      flow_ids=list(agent.flow_ids), first_ns=agent.top_bucket * int(c.bucket_s * _NS),
                      last_ns=now_ns, remote_ip=resolver)
        out: list[Detection] = []
        if rate_due:
            confidence = 0.55 + 0.4 * ramp(rate, c.absolute_qps, 5 * c.absolute_qps)
            reason = f"{rate:.0f} queries/s, above the {c.absolute_qps:.0f}/s ceiling"
            out.append(make_detection("dpi.dns.flood_rate", Category.DNS_FLOOD, confidence, Severity.HIGH,
                                      evidence={**evidence, "reason": reason}, **common))  # type: ignore[arg-type]
        if z_due:
            confidence = 0.45 + 0.4 * ramp(z, c.baseline_z, 4 * c.baseline_z)
            reason = f"{rate:.0f} queries/s is {z:.0f} standard deviations above this agent's baseline"
            out.append(make_detection("dpi.dns.flood_baseline", Category.DNS_FLOOD, confidence, Severity.MEDIUM,
                                      evidence={**evidence, "reason": reason}, **common))  # type: ignore[arg-type]
        return out
