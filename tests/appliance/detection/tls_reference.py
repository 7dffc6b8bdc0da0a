"""TlsAnalyzer.analyze's first half as it was in Python, before tls_gate.h: the reference the C gate is held to
(tests/appliance/detection/test_tls_gate.py). The second half (`_judge`) is the detector's own."""

from __future__ import annotations

from typing import Any

from appliance.detection.analysis_config import AnalysisConfig
from appliance.detection.dpi.tls import TlsAnalyzer
from appliance.detection.facts import Facts
from appliance.model import Detection, FlowRecord, Transport


def gate_reference(analyzer: TlsAnalyzer, flow: Any, tls: Any, hello: Any, config: AnalysisConfig) -> tuple[Any, ...] | None:
    """What `native_dpi.tls_gate` answers, in Python: None when the flow can raise nothing, else (rare, rarity,
    resolution); the analyzer's fingerprint prevalence observed on the way."""
    if flow.transport is not Transport.TCP or flow.packets_out == 0:
        return None
    c = config.tls
    agent_id, first_ns = flow.agent_id, flow.first_ns
    rare = False
    rarity = None
    if tls is None:
        if flow.remote_port not in c.ports:
            return None
    else:
        ja4 = tls.ja4
        if ja4:
            rarity = analyzer.prevalence.observe(agent_id, ja4, first_ns)
            if rarity is not None:
                others, watched_s, handshakes = rarity
                rare = (others <= c.rare_max_fleet_agents and watched_s >= c.rare_learning_s
                        and handshakes >= c.rare_min_handshakes)
    sni = hello.sni if hello is not None else ""
    resolution = analyzer._lookup(agent_id, flow.remote_ip, first_ns, c.resolution_window_s)
    if resolution is not None and not rare and (tls is None or not tls.certificates) and (
            not sni or sni in resolution.names):
        return None
    return rare, rarity, resolution


class TlsAnalyzerReference(TlsAnalyzer):
    def analyze(self, flow: FlowRecord, facts: Facts, config: AnalysisConfig) -> list[Detection]:
        gate = gate_reference(self, flow, facts.tls, facts.client_hello, config)
        return [] if gate is None else self._judge(flow, facts, config, *gate)
