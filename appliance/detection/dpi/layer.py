"""The DPI layer: DNS, TLS, ICMP and HTTP analyzers behind one `analyze(flow)`."""

from __future__ import annotations

from appliance.detection.analysis_config import AnalysisConfigHolder
from appliance.detection.domains import RegisteredDomains
from appliance.detection.dpi.dga import NameScorer
from appliance.detection.dpi.dga_signals import DgaSignals
from appliance.detection.dpi.dga_words import WordModel
from appliance.detection.dpi.dns import DnsAnalyzer
from appliance.detection.dpi.http import HttpAnalyzer
from appliance.detection.dpi.icmp import IcmpAnalyzer
from appliance.detection.dpi.tls import TlsAnalyzer
from appliance.detection.facts import FlowFacts
from appliance.detection.resolutions import ResolverCache
from appliance.model import Detection, DnsMessage, FlowRecord, Transport


class DpiLayer:
    """Protocol analysis of finished flows; also takes resolver events to learn resolutions."""

    name = "dpi"

    def __init__(self, config: AnalysisConfigHolder, facts: FlowFacts, resolver: ResolverCache,
                 domains: RegisteredDomains, scorer: NameScorer, words: WordModel) -> None:
        self._config = config
        self._facts = facts
        self._resolver = resolver
        self.dns = DnsAnalyzer(domains, scorer)
        self.dga = DgaSignals(domains, words)
        self.tls = TlsAnalyzer(resolver, domains)
        self.icmp = IcmpAnalyzer()
        self.http = HttpAnalyzer()

    def analyze(self, flow: FlowRecord) -> list[Detection]:
        config = self._config.current
        transport = flow.transport
        if transport is Transport.UDP:
            if not flow.dns:
                return []
            found = self.dns.analyze(flow, config)
            if flow.remote_port == 53:
                found.extend(self.dga.analyze(flow, config))
            return found
        if transport is Transport.TCP:
            out: list[Detection] = []
            if flow.dns:
                out.extend(self.dns.analyze(flow, config))
            facts = self._facts.facts(flow)
            out.extend(self.tls.analyze(flow, facts, config))
            if facts.http_requests:
                out.extend(self.http.analyze(flow, facts, config))
            return out
        if transport is Transport.ICMP:
            return self.icmp.analyze(flow, config)
        return []

    def observe_dns(self, agent_id: str, message: DnsMessage) -> None:
        self._resolver.observe(agent_id, message)
