"""TLS to an address the agent never resolved, and ClientHello SNI that no recent resolution backs."""

from __future__ import annotations

from appliance.detection.analysis_config import AnalysisConfig
from appliance.detection.detections import Throttle, make_detection
from appliance.detection.domains import RegisteredDomains
from appliance.detection.facts import Facts
from appliance.detection.resolutions import ResolverCache, is_private
from appliance.model import Category, Detection, FlowRecord, Severity, Transport


class TlsAnalyzer:
    """Raises RawIpTls detections from flows on TLS ports or carrying a ClientHello."""

    def __init__(self, resolver: ResolverCache, domains: RegisteredDomains) -> None:
        self._resolver = resolver
        self._domains = domains
        self._throttle = Throttle()

    def analyze(self, flow: FlowRecord, facts: Facts, config: AnalysisConfig) -> list[Detection]:
        c = config.tls
        hello = facts.client_hello
        if flow.transport is not Transport.TCP or flow.packets_out == 0:
            return []
        if hello is None and flow.remote_port not in c.ports:
            return []
        address = flow.remote_addr
        if c.ignore_private and is_private(address):
            return []
        sni = hello.sni if hello is not None else ""
        version = hello.version if hello is not None else ""
        resolution = self._resolver.lookup(flow.agent_id, address, flow.first_ns, c.resolution_window_s)
        evidence = {"sni": sni, "tls_version": version, "remote_port": flow.remote_port,
                    "client_hello": hello is not None, "resolved_as": resolution.name if resolution else ""}
        common = dict(agent_id=flow.agent_id, indicator=address, protocol="tls", transport="tcp",
                      flow_ids=[flow.flow_id], first_ns=flow.first_ns, last_ns=flow.last_ns,
                      remote_ip=address, domain=sni)
        if resolution is None:
            confidence = 0.55 if sni else 0.6
            reason = (f"TLS to {address}:{flow.remote_port} which the agent did not resolve through DNS"
                      + (f" (SNI {sni})" if sni else " (no SNI)"))
            return [make_detection("dpi.tls.raw_ip", Category.RAW_IP_TLS, confidence, Severity.MEDIUM,
                                   evidence={**evidence, "reason": reason}, **common)]  # type: ignore[arg-type]
        if sni and sni not in resolution.names:
            sni_registered = self._domains.registered(sni)
            backed = {self._domains.registered(n) for n in resolution.names}
            if sni_registered not in backed and not self._resolver.name_resolved(
                    flow.agent_id, sni, flow.first_ns, c.resolution_window_s):
                reason = f"SNI {sni} matches no recent resolution; {address} was resolved as {resolution.name}"
                return [make_detection("dpi.tls.sni_mismatch", Category.RAW_IP_TLS, 0.5, Severity.MEDIUM,
                                       evidence={**evidence, "reason": reason}, **common)]  # type: ignore[arg-type]
        return []
