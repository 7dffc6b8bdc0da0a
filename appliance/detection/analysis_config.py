"""The analysis config: every detector threshold, window and correlation parameter, typed.

Validated once (pydantic, unknown keys refused, each error names the key); held by
`AnalysisConfigHolder`, whose `current` is swapped atomically so the worker reads one consistent
snapshot per flow. Persisted in SQLite (`ConfigStore`) so a POSTed config survives a restart.
Times are seconds of event time (the timestamps agents put on packets).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from appliance.detection.database import DetectionDatabase

Ratio = Annotated[float, Field(ge=0.0, le=1.0)]
Seconds = Annotated[float, Field(gt=0, le=7 * 86400)]
Count = Annotated[int, Field(ge=1, le=10**12)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class DnsTunnelingConfig(_Section):
    window_s: Seconds = 300.0
    min_queries: Count = 15  # queries under one registered domain before it is judged
    min_unique_subdomains: Count = 12
    min_mean_subdomain_length: Annotated[float, Field(ge=1, le=255)] = 24.0
    min_label_entropy: Annotated[float, Field(ge=0, le=8)] = 3.2  # bits/char of the subdomain part
    min_name_bytes: Count = 600  # bytes of unique query names per domain per window (Paxson et al.)
    suspicious_qtype_share: Ratio = 0.5  # TXT/NULL/CNAME share that adds confidence


class DgaConfig(_Section):
    window_s: Seconds = 600.0
    name_threshold: Ratio = 0.5  # per-name randomness score that makes a domain suspicious
    min_suspicious_domains: Count = 10  # distinct suspicious registered domains per agent per window
    min_suspicious_share: Ratio = 0.5  # of the agent's new registered domains in the window
    nxdomain_ratio: Ratio = 0.5  # NXDOMAIN share of the agent's answered queries that is evidence
    nxdomain_min_responses: Count = 20
    # The short-burst signals (dga_signals.py): unresolved never-seen domains, and their name shapes.
    burst_window_s: Seconds = 300.0
    burst_min_domains: Count = 6  # unresolved unknown registered domains per agent per burst window
    burst_baseline_factor: Annotated[float, Field(ge=1, le=100)] = 3.0  # times the agent's usual count per window
    common_domain_agents: Annotated[int, Field(ge=2, le=1_000_000)] = 3  # this many agents asking: not unknown
    prevalence_window_s: Seconds = 3600.0
    lexical_min_domains: Count = 5  # unresolved unknown domains with a DGA name shape
    lexical_min_share: Ratio = 0.6  # of the unresolved unknown domains in the window


class DnsFloodConfig(_Section):
    bucket_s: Seconds = 10.0
    absolute_qps: Annotated[float, Field(gt=0)] = 50.0  # ceiling whatever the baseline
    baseline_z: Annotated[float, Field(gt=0)] = 3.0
    baseline_min_qps: Annotated[float, Field(gt=0)] = 10.0  # below this rate no baseline alarm
    warmup_buckets: Count = 30


class TlsConfig(_Section):
    ports: list[Annotated[int, Field(ge=1, le=65535)]] = Field(default_factory=lambda: [443, 8443, 993, 995, 465])
    resolution_window_s: Seconds = 3600.0  # a resolution counts this long after it was seen (or its TTL, if longer)
    ignore_private: bool = True  # LAN services (printers, NAS) are reached by address all the time


class IcmpConfig(_Section):
    max_standard_payload: Annotated[int, Field(ge=0, le=65535)] = 1472
    entropy_threshold: Annotated[float, Field(ge=0, le=8)] = 5.0  # bits/byte over payloads > 32 bytes
    sustained_pps: Annotated[float, Field(gt=0)] = 10.0
    sustained_min_s: Seconds = 10.0


class HttpConfig(_Section):
    exfil_bytes: Count = 5_000_000  # outbound body bytes to one host per window
    exfil_ratio: Annotated[float, Field(ge=1)] = 10.0  # outbound/inbound that makes an upload one-sided
    exfil_window_s: Seconds = 600.0
    large_upload_bytes: Count = 1_000_000  # one request body this large is evidence on its own
    token_min_length: Annotated[int, Field(ge=8, le=4096)] = 48
    token_min_entropy: Annotated[float, Field(ge=0, le=8)] = 4.2


class BeaconingConfig(_Section):
    min_connections: Annotated[int, Field(ge=3, le=100_000)] = 8
    max_cv: Annotated[float, Field(ge=0, le=10)] = 0.15
    min_interval_s: Annotated[float, Field(ge=0)] = 5.0  # faster than this is a stream, not a beacon
    history: Annotated[int, Field(ge=4, le=10_000)] = 64
    ignore_ports: list[Annotated[int, Field(ge=0, le=65535)]] = Field(default_factory=lambda: [53, 123, 5353, 67, 68, 137, 138])
    # A destination this many agents talk to within `prevalence_window_s` is shared infrastructure
    # (push services, update checks): its periodic traffic raises no beaconing. 0 turns this off.
    common_destination_agents: Annotated[int, Field(ge=0, le=1_000_000)] = 5
    prevalence_window_s: Seconds = 3600.0


class VolumeConfig(_Section):
    bucket_s: Seconds = 60.0
    z_threshold: Annotated[float, Field(gt=0)] = 3.0
    warmup_buckets: Count = 20
    min_bytes: Count = 20_000_000  # a bucket below this never alarms, whatever its z-score
    ema_alpha: Annotated[float, Field(gt=0, le=1)] = 0.1


class CorrelationConfig(_Section):
    window_s: Seconds = 300.0
    half_life_s: Seconds = 300.0
    min_detections: Annotated[int, Field(ge=1, le=1000)] = 2
    min_confidence: Ratio = 0.6
    diversity_bonus: Annotated[float, Field(ge=0, le=1)] = 0.10
    diversity_cap: Annotated[float, Field(ge=0, le=1)] = 0.30
    escalate_above: Ratio = 0.9


class DetectorConfig(_Section):
    report_interval_s: Seconds = 120.0  # one windowed detector re-reports one key at most this often


class AnalysisConfig(_Section):
    """The whole analysis config (GET/POST /api/v1/config)."""

    detectors: DetectorConfig = DetectorConfig()
    dns_tunneling: DnsTunnelingConfig = DnsTunnelingConfig()
    dga: DgaConfig = DgaConfig()
    dns_flood: DnsFloodConfig = DnsFloodConfig()
    tls: TlsConfig = TlsConfig()
    icmp: IcmpConfig = IcmpConfig()
    http: HttpConfig = HttpConfig()
    beaconing: BeaconingConfig = BeaconingConfig()
    volume: VolumeConfig = VolumeConfig()
    correlation: CorrelationConfig = CorrelationConfig()


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """`override` laid over `base`, section by section (used to seed from config.yaml)."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


class ConfigStore:
    """Persists the analysis config as one JSON row."""

    def __init__(self, db: DetectionDatabase) -> None:
        self._db = db.conn
        self._lock = db.lock
        with self._lock, self._db:
            self._db.execute("CREATE TABLE IF NOT EXISTS analysis_config (id INTEGER PRIMARY KEY CHECK (id = 1), body TEXT NOT NULL)")

    def load(self) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute("SELECT body FROM analysis_config WHERE id = 1").fetchone()
        return json.loads(row[0]) if row else None

    def save(self, config: AnalysisConfig) -> None:
        with self._lock, self._db:
            self._db.execute("INSERT OR REPLACE INTO analysis_config (id, body) VALUES (1, ?)", (config.model_dump_json(),))


class AnalysisConfigHolder:
    """The config in force; `replace` validates nothing (callers pass a validated object)."""

    def __init__(self, config: AnalysisConfig, store: ConfigStore | None = None) -> None:
        self.current = config
        self._store = store
        self._listeners: list[Callable[[AnalysisConfig], None]] = []

    def replace(self, config: AnalysisConfig) -> None:
        if self._store is not None:
            self._store.save(config)
        self.current = config
        for listener in self._listeners:
            listener(config)

    def on_change(self, listener: Callable[[AnalysisConfig], None]) -> None:
        self._listeners.append(listener)


def load_analysis_config(store: ConfigStore, seed: dict[str, Any]) -> AnalysisConfig:
    """The persisted config if there is a valid one, else defaults overlaid with `analysis.detectors`."""
    import logging

    from pydantic import ValidationError

    from appliance.config import describe_errors
    from appliance.errors import ConfigError

    saved = store.load()
    if saved is not None:
        try:
            return AnalysisConfig.model_validate(saved)
        except ValidationError as err:
            logging.getLogger(__name__).warning("persisted analysis config ignored: %s",
                                                describe_errors(err, "analysis_config").replace("\n", "; "))
    try:
        return AnalysisConfig.model_validate(merge(AnalysisConfig().model_dump(), seed))
    except ValidationError as err:
        raise ConfigError(describe_errors(err, "analysis.detectors")) from None
