"""The DPI layer: DNS, TLS, ICMP and HTTP analyzers behind one `analyze(flow)`."""

from __future__ import annotations

from typing import Any

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
from appliance.native.dpi import dpi_loop, tls_gate
from appliance.pipeline import FlowFailed

_TCP, _UDP, _ICMP = Transport.TCP, Transport.UDP, Transport.ICMP
# What dpi_loop asks `lead` to judge (dpi_loop.h's LEAD_* in that order).
LEAD_TCP_DNS, LEAD_TCP, LEAD_DNS, LEAD_DNS_OUT, LEAD_DGA, LEAD_DGA_OUT, LEAD_ICMP = range(7)


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
        AnalysisLayer.analyze_many). The loop runs in C (native dpi_loop, dpi_loop.h): it calls the analyzers' C
        parts (the DNS and DGA scans, a TCP flow's facts, the TLS gate) itself and comes back here, to `lead`, only
        where a judge or a Python analyzer must look, at once: most flows raise nothing and cost no Python at all.
        One config for the whole list."""
        config = self._config.current
        dns, dga, tls, http, icmp = self.dns, self.dga, self.tls, self.http, self.icmp
        dns.configure(config)
        dga.configure(config)
        tls.configure(config)

        def lead(kind: int, flow: FlowRecord, a: Any, b: Any) -> list[Detection] | None:
            if kind == LEAD_TCP:  # a: the facts, b: the gate's (rare, rarity, resolution) or None
                found = tls.judge(flow, a, config, *b) if b is not None else None
                if a.http_requests:
                    judged = http.analyze(flow, a, config)
                    found = found + judged if found else judged
                return found
            if kind == LEAD_DNS:
                return dns.judge(flow, a, config)
            if kind == LEAD_DGA:
                return dga.judge(flow, a, config)
            if kind == LEAD_ICMP:
                return icmp.analyze(flow, config)
            if kind == LEAD_TCP_DNS:
                return dns.analyze(flow, config)
            return (dns if kind == LEAD_DNS_OUT else dga).out_of_range(flow)

        parts = (_TCP, _UDP, _ICMP, self._facts.facts, tls_gate, tls.gate_state, dns.scan_function, dga.scan_function)
        return dpi_loop(flows, failed, parts, lead)

    def observe_dns(self, agent_id: str, message: DnsMessage) -> None:
        self._resolver.observe(agent_id, message)
