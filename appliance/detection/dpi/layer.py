"""The DPI layer: DNS, TLS, ICMP and HTTP analyzers behind one `analyze(flow)`."""

from __future__ import annotations

from appliance.detection.analysis_config_holder import AnalysisConfigHolder
from appliance.detection.domains import RegisteredDomains
from appliance.detection.dpi.dga import NameScorer
from appliance.detection.dpi.dga_signals import DgaSignals
from appliance.detection.dpi.dga_words import WordModel
from appliance.detection.dpi.dns import DnsAnalyzer
from appliance.detection.dpi.http import HttpAnalyzer
from appliance.detection.dpi.icmp import IcmpAnalyzer
from appliance.detection.dpi.tls import TlsAnalyzer
from appliance.detection.dpi.tls_cert import SYSTEM_TRUST_ANCHORS, TrustAnchors
from appliance.detection.facts import FlowFacts
from appliance.detection.resolutions import ResolverCache
from appliance.model import Detection, DnsMessage, FlowRecord, Transport
from appliance.native.dpi import tls_gate
from appliance.pipeline import FlowFailed

_TCP, _UDP, _ICMP = Transport.TCP, Transport.UDP, Transport.ICMP


class DpiLayer:
    """Protocol analysis of finished flows; also takes resolver events to learn resolutions."""

    name = "dpi"

    def __init__(self, config: AnalysisConfigHolder, facts: FlowFacts, resolver: ResolverCache,
                 domains: RegisteredDomains, scorer: NameScorer, words: WordModel,
                 anchors: TrustAnchors | None = None) -> None:
        self._config = config
        self._facts = facts
        self._resolver = resolver
        self.dns = DnsAnalyzer(domains, scorer)
        self.dga = DgaSignals(domains, words)
        self.tls = TlsAnalyzer(resolver, domains, anchors if anchors is not None else TrustAnchors.load(SYSTEM_TRUST_ANCHORS))
        self.icmp = IcmpAnalyzer()
        self.http = HttpAnalyzer()

    def analyze(self, flow: FlowRecord) -> list[Detection]:
        found = self.analyze_many([flow])
        return found[0][1] if found else []

    def analyze_many(self, flows: list[FlowRecord], failed: FlowFailed | None = None) -> list[tuple[int, list[Detection]]]:
        """(index, detections) of each flow of `flows` that raised any, in order (the pipeline's loop, see
        AnalysisLayer.analyze_many). Each analyzer's judges run only when its C part (the DNS and DGA scans, the
        TLS gate) says one may report; the loop calls those parts itself, one config for the whole list: most
        flows raise nothing and cost here only what they must."""
        config = self._config.current
        dns, dga, tls, facts_of = self.dns, self.dga, self.tls, self._facts.facts
        dns.configure(config)
        dga.configure(config)
        tls.configure(config)
        dns_scan, dga_scan, gate_state = dns.scan_function, dga.scan_function, tls.gate_state
        out: list[tuple[int, list[Detection]]] = []
        for i, flow in enumerate(flows):
            try:
                transport = flow.transport
                if transport is _TCP:  # TLS flows first: the most of any corpus
                    found = dns.analyze(flow, config) if flow.dns else None
                    facts = facts_of(flow)
                    gate = tls_gate(flow, facts.tls, facts.client_hello, gate_state)
                    if gate is not None:
                        judged = tls.judge(flow, facts, config, *gate)
                        found = found + judged if found else judged
                    if facts.http_requests:
                        judged = self.http.analyze(flow, facts, config)
                        found = found + judged if found else judged
                elif transport is _UDP:
                    if not flow.dns or flow.remote_port != 53:
                        continue
                    try:
                        scanned = dns_scan(flow)
                    except ValueError:
                        scanned = dns.out_of_range(flow)
                    found = None if scanned is None else dns.judge(flow, scanned, config)
                    try:
                        scanned = dga_scan(flow)
                    except ValueError:
                        scanned = dga.out_of_range(flow)
                    if scanned is not None:
                        judged = dga.judge(flow, scanned, config)
                        found = found + judged if found else judged
                elif transport is _ICMP:
                    found = self.icmp.analyze(flow, config)
                else:
                    continue
            except Exception:
                if failed is None:
                    raise
                failed(flow)
                continue
            if found:
                out.append((i, found))
        return out

    def observe_dns(self, agent_id: str, message: DnsMessage) -> None:
        self._resolver.observe(agent_id, message)
