"""The detection pipeline: DPI, signatures and behaviour layers, correlation, alerts, exclusions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from appliance.detection.alert_channel import AlertChannel
    from appliance.detection.alert_store import AlertStore
    from appliance.detection.analysis_config_holder import AnalysisConfigHolder
    from appliance.detection.behaviour import BehaviourLayer
    from appliance.detection.correlation import Correlator
    from appliance.detection.database import DetectionDatabase
    from appliance.detection.dpi.layer import DpiLayer
    from appliance.detection.exclusions import ExclusionStore
    from appliance.detection.facts import FlowFacts
    from appliance.export import JsonLinesExporter
    from appliance.detection.resolutions import ResolverCache
    from appliance.detection.signatures.engine import SignatureEngine
    from appliance.detection.signatures.watcher import SignatureWatcher


# The IP protocols whose payload samples the layers read: TCP (HTTP requests and TLS handshakes: facts.py) and
# ICMP (the ICMP analyzer, icmp signatures). The analysis process decodes no other flow's samples (a DNS flow
# carries up to 8, never read: its messages are in `dns`). A layer that comes to read more adds its protocol
# here; tests/appliance/analysis/test_worker.py holds the detections equal with and without the mask.
SAMPLED_PROTOCOLS = frozenset({1, 6})


@dataclass
class DetectionParts:
    """Handles on the detection objects `app.build` wired (for the Appliance, tests and benchmarks)."""

    db: DetectionDatabase
    config: AnalysisConfigHolder
    resolver: ResolverCache
    dpi: DpiLayer
    signatures: SignatureEngine
    watcher: SignatureWatcher
    behaviour: BehaviourLayer
    correlator: Correlator
    channel: AlertChannel
    alerts: AlertStore
    exclusions: ExclusionStore
    facts: FlowFacts
    exporter: JsonLinesExporter | None = None  # export.enabled
