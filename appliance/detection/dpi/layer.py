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
        # Every analyzer returns a list of its own (new per call): it is extended here, not copied.
        transport = flow.transport
        if transport is _TCP:  # TLS flows first: the most of any corpus
            config = self._config.current
            if flow.dns:
                out = self.dns.analyze(flow, config)
                facts = self._facts.facts(flow)
                out.extend(self.tls.analyze(flow, facts, config))
            else:
                facts = self._facts.facts(flow)
                out = self.tls.analyze(flow, facts, config)
            if facts.http_requests:
                out.extend(self.http.analyze(flow, facts, config))
            return out
        if transport is _UDP:
            if not flow.dns:
                return []
            config = self._config.current
            found = self.dns.analyze(flow, config)
            if flow.remote_port == 53:
                found.extend(self.dga.analyze(flow, config))
            return found
        if transport is _ICMP:
            return self.icmp.analyze(flow, self._config.current)
        return []

    def observe_dns(self, agent_id: str, message: DnsMessage) -> None:
        self._resolver.observe(agent_id, message)
