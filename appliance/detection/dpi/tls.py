"""TLS findings per flow: an address the agent never resolved, a ClientHello SNI that no recent
resolution backs, a client fingerprint rare on this agent and the fleet, and anomalies of the
server's certificate chain (seen in clear up to TLS 1.2). Destinations on private networks are not
judged (`tls.ignore_private`)."""

from __future__ import annotations

from typing import Any

from appliance.detection.analysis_config import AnalysisConfig
from appliance.detection.detections import Throttle, make_detection
from appliance.detection.domains import RegisteredDomains
from appliance.detection.dpi.tls_cert import AnomalyLimits, TrustAnchors, chain_anomalies
from appliance.detection.dpi.tls_meta import TlsMetadata
from appliance.detection.facts import Facts
from appliance.detection.resolutions import Resolution, ResolverCache, is_private
from appliance.model import Category, Detection, FlowRecord, Severity, Transport, ip_str
from appliance.native.dpi import tls_gate

_NS = 1_000_000_000
_TCP = Transport.TCP
# Certificate findings that say the server is not who a public service would be; the rest are weaker hints.
_MEDIUM = frozenset({"dpi.tls.cert_self_signed", "dpi.tls.cert_unknown_issuer", "dpi.tls.cert_expired",
                     "dpi.tls.cert_sni_mismatch"})


class FingerprintPrevalence:
    """Which agents have shown which JA4, and how long each agent has been watched (bounded memory)."""

    def __init__(self, max_fingerprints: int = 100_000, max_agents_per_fingerprint: int = 64) -> None:
        self._agents_of: dict[str, set[str]] = {}
        self._watched: dict[str, list[int]] = {}  # agent -> [first handshake ns, handshakes]
        self._max_fingerprints = max_fingerprints
        self._max_agents = max_agents_per_fingerprint

    def observe(self, agent_id: str, fingerprint: str, now_ns: int) -> tuple[int, float, int] | None:
        """Records one handshake; returns None when this agent has shown the fingerprint before (most
        handshakes: nothing to judge), else (other agents with it, seconds watched, handshakes before)."""
        watched = self._watched.get(agent_id)
        if watched is None:
            if len(self._watched) >= self._max_fingerprints:
                del self._watched[next(iter(self._watched))]  # the agent watched longest ago starts over
            watched = self._watched[agent_id] = [now_ns, 0]
        handshakes = watched[1]
        watched[1] = handshakes + 1
        agents = self._agents_of.get(fingerprint)
        if agents is None:
            if len(self._agents_of) >= self._max_fingerprints:
                del self._agents_of[next(iter(self._agents_of))]  # the oldest fingerprint learned is forgotten first
            agents = self._agents_of[fingerprint] = set()
        elif agent_id in agents:
            return None
        others = len(agents)
        if others < self._max_agents:  # past the cap it is common anyway
            agents.add(agent_id)
        return others, max(now_ns - watched[0], 0) / _NS, handshakes


class TlsAnalyzer:
    """Raises RawIpTls detections from flows on TLS ports or carrying a TLS handshake."""

    def __init__(self, resolver: ResolverCache, domains: RegisteredDomains, anchors: TrustAnchors) -> None:
        self._resolver = resolver
        self._domains = domains
        self._anchors = anchors
        self._throttle = Throttle()
        self.prevalence = FingerprintPrevalence()
        self._lookup = resolver.lookup_function()  # (agent_id, address, at_ns, window_s) -> Resolution | None
        self._configured: AnalysisConfig | None = None
        self._gate: tuple[Any, ...] = ()

    def configure(self, config: AnalysisConfig) -> None:
        """tls_gate's state for this config: the prevalence's and resolver's maps, the ports, the rarity thresholds
        (nothing to do while it is the config in force)."""
        if config is self._configured:
            return
        c, p = config.tls, self.prevalence
        by_ip, maker = self._lookup.args
        self._gate = (_TCP, c.ports, p._agents_of, p._watched, p._max_fingerprints, p._max_agents, by_ip, maker,
                      c.resolution_window_s, c.rare_max_fleet_agents, c.rare_learning_s, c.rare_min_handshakes)
        self._configured = config

    def analyze(self, flow: FlowRecord, facts: Facts, config: AnalysisConfig) -> list[Detection]:
        self.configure(config)
        # Whether the flow can raise anything, the fingerprint's prevalence observed on the way (C: tls_gate.h):
        # most flows are resolved, their SNI among the names (or none), not rare, no chain in clear.
        gate = tls_gate(flow, facts.tls, facts.client_hello, self._gate)
        if gate is None:
            return []
        return self.judge(flow, facts, config, *gate)

    @property
    def gate_state(self) -> tuple[Any, ...]:
        """tls_gate's last argument under the config `configure` was last given, for a loop over many flows (the DPI
        layer's): `tls_gate(flow, facts.tls, facts.client_hello, gate_state)`, and `judge` when it is not None."""
        return self._gate

    def judge(self, flow: FlowRecord, facts: Facts, config: AnalysisConfig, rare: bool,
              rarity: tuple[int, float, int] | None, resolution: Resolution | None) -> list[Detection]:
        """What a flow the gate let through raises: `rarity` as FingerprintPrevalence.observe answered it (None when
        the agent had shown the fingerprint before or the flow has none), `rare` its verdict, the resolution or None."""
        c = config.tls
        tls, hello = facts.tls, facts.client_hello
        if rarity is not None:
            others, watched_s, handshakes = rarity
        sni = hello.sni if hello is not None else ""
        address = ip_str(flow.remote_ip)  # flow.remote_addr without the property's Python frame
        if c.ignore_private and is_private(address):
            return []
        mismatch = resolution is not None and bool(sni) and sni not in resolution.names and self._unbacked(
            flow, sni, resolution.names, c.resolution_window_s)
        if not (resolution is None or mismatch or rare or (tls is not None and tls.certificates)):
            return []
        version = hello.version if hello is not None else ""
        evidence: dict[str, Any] = {"sni": sni, "tls_version": version, "remote_port": flow.remote_port,
                                    "client_hello": hello is not None, "resolved_as": resolution.name if resolution else "",
                                    "ja4": tls.ja4 if tls is not None else ""}
        common = dict(agent_id=flow.agent_id, indicator=address, protocol="tls", transport="tcp",
                      flow_ids=[flow.flow_id], first_ns=flow.first_ns, last_ns=flow.last_ns,
                      remote_ip=address, domain=sni)
        out: list[Detection] = []
        if resolution is None:
            confidence = 0.55 if sni else 0.6
            reason = (f"TLS to {address}:{flow.remote_port} which the agent did not resolve through DNS"
                      + (f" (SNI {sni})" if sni else " (no SNI)"))
            out.append(make_detection("dpi.tls.raw_ip", Category.RAW_IP_TLS, confidence, Severity.MEDIUM,
                                      evidence={**evidence, "reason": reason}, **common))  # type: ignore[arg-type]
        elif mismatch:
            reason = f"SNI {sni} matches no recent resolution; {address} was resolved as {resolution.name}"
            out.append(make_detection("dpi.tls.sni_mismatch", Category.RAW_IP_TLS, 0.5, Severity.MEDIUM,
                                      evidence={**evidence, "reason": reason}, **common))  # type: ignore[arg-type]
        if tls is None:
            return out
        if rare:
            where = "this agent or the fleet" if others == 0 else f"this agent ({others} other agents have it)"
            reason = f"TLS client fingerprint {tls.ja4} never seen on {where}"
            out.append(make_detection(
                "dpi.tls.rare_fingerprint", Category.RAW_IP_TLS, 0.3 if others == 0 else 0.2, Severity.LOW,
                evidence={**evidence, "ja3": tls.ja3, "fleet_agents": others, "agent_watched_s": round(watched_s),
                          "agent_handshakes": handshakes, "reason": reason}, **common))  # type: ignore[arg-type]
        if tls.certificates:
            out.extend(self._certificates(flow, tls, config, evidence, common))
        return out

    def _unbacked(self, flow: FlowRecord, sni: str, names: tuple[str, ...], window_s: float) -> bool:
        """True when no name the address was resolved as shares the SNI's registered domain, nor was the
        SNI itself resolved lately (a CDN answering for a sibling name is backed)."""
        sni_registered = self._domains.registered(sni)
        if sni_registered in {self._domains.registered(n) for n in names}:
            return False
        return not self._resolver.name_resolved(flow.agent_id, sni, flow.first_ns, window_s)

    def _certificates(self, flow: FlowRecord, tls: TlsMetadata, config: AnalysisConfig, evidence: dict[str, Any],
                      common: dict[str, Any]) -> list[Detection]:
        c = config.tls
        limits = AnomalyLimits(c.cert_min_validity_days, c.cert_fresh_s)
        out = []
        for anomaly in chain_anomalies(tls.certificates, tls.sni, flow.first_ns / _NS, self._anchors, limits):
            key = (anomaly.detector, flow.agent_id, flow.remote_addr)
            if not self._throttle.allow(key, flow.last_ns, config.detectors.report_interval_s):
                continue
            severity = Severity.MEDIUM if anomaly.detector in _MEDIUM else Severity.LOW
            out.append(make_detection(anomaly.detector, Category.RAW_IP_TLS, anomaly.confidence, severity,
                                      evidence={**evidence, **anomaly.evidence, "reason": anomaly.reason},
                                      **common))  # type: ignore[arg-type]
        return out
