"""Settings: `config.yaml` parsed once, at the edge, into typed objects.

Every key has an embedded default, so the appliance starts with no file at all. An unknown key
or a bad value stops start-up with one message per problem naming the key and the value.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from appliance.errors import ConfigError


# The checkout the appliance runs from: the shipped rules live here, and the default state goes
# here, whatever directory it is started from (a bare `rules` would load an empty directory).
INSTALL_ROOT = Path(__file__).resolve().parents[1]
SHIPPED_RULES = INSTALL_ROOT / "rules"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _check_listen(value: str) -> str:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError("must be host:port with a port from 0 to 65535")
    return value


def split_listen(value: str) -> tuple[str, int]:
    """("0.0.0.0", 8080) from "0.0.0.0:8080"; IPv6 hosts may be bracketed."""
    host, _, port = value.rpartition(":")
    return host.strip("[]"), int(port)


class GrpcSettings(_Section):
    listen: str = "0.0.0.0:50051"
    tls: bool = True
    max_streams: Annotated[int, Field(ge=1, le=4096)] = 64
    # Streams one agent identity (its client certificate; its agent id without mTLS) may hold at once.
    # An agent opens up to five (one per stream kind); the rest is room for reconnects.
    max_streams_per_agent: Annotated[int, Field(ge=1, le=4096)] = 8
    max_message_bytes: Annotated[int, Field(ge=1024, le=64 * 1024 * 1024)] = 4 * 1024 * 1024

    _listen = field_validator("listen")(_check_listen)


class RestSettings(_Section):
    listen: str = "0.0.0.0:8080"
    tls: bool = True
    threads: Annotated[int, Field(ge=1, le=512)] = 16
    max_body_bytes: Annotated[int, Field(ge=1024, le=64 * 1024 * 1024)] = 1024 * 1024
    # Abuse limits of the HTTP front (README, "Security limits"): no worker thread before a whole request.
    head_timeout: Annotated[float, Field(gt=0, le=300)] = 10.0
    body_timeout: Annotated[float, Field(gt=0, le=3600)] = 30.0
    min_body_rate: Annotated[int, Field(ge=1024, le=1 << 30)] = 64 * 1024
    keepalive_timeout: Annotated[float, Field(gt=0, le=3600)] = 15.0
    write_timeout: Annotated[float, Field(gt=0, le=3600)] = 30.0
    max_connections_per_source: Annotated[int, Field(ge=1, le=100_000)] = 64
    max_connections: Annotated[int, Field(ge=1, le=100_000)] = 1024
    # Hold every reply to its route's declared model (a reply that breaks it answers 500): the tests turn it on.
    check_replies: bool = False

    _listen = field_validator("listen")(_check_listen)


class DashboardSettings(_Section):
    listen: str = "0.0.0.0:3000"
    # The REST API the console speaks to; default https://127.0.0.1:<rest port> (http when rest.tls is false).
    api_url: str = ""
    dist_dir: Path = INSTALL_ROOT / "console" / "dist"  # the built web app (make console)
    threads: Annotated[int, Field(ge=2, le=512)] = 16
    session_idle_minutes: Annotated[float, Field(gt=0, le=24 * 60)] = 30.0
    session_max_hours: Annotated[float, Field(gt=0, le=24 * 30)] = 12.0

    _listen = field_validator("listen")(_check_listen)

    @field_validator("api_url")
    @classmethod
    def _api_url(cls, value: str) -> str:
        if value and not re.fullmatch(r"https?://[A-Za-z0-9.\[\]:-]+", value):
            raise ValueError("must be http(s)://host:port with no path, query, quotes or spaces")
        return value.rstrip("/")




class PathSettings(_Section):
    """Defaults resolve against the installation; relative paths in a config file against the working directory."""

    state_dir: Path = INSTALL_ROOT / "var"
    signatures_dir: Path = SHIPPED_RULES
    static_dir: Path = INSTALL_ROOT / "var" / "static"
    certs_dir: Path = INSTALL_ROOT / "var" / "certs"
    # The roots TLS certificate checks trust (PEM bundle; Debian's ca-certificates by default).
    tls_trust_anchors: Path = Path("/etc/ssl/certs/ca-certificates.crt")


class LimitSettings(_Section):
    max_flows: Annotated[int, Field(ge=10, le=10_000_000)] = 200_000
    # An agent at this many flows evicts its own longest-idle flow: one agent cannot fill the table.
    max_flows_per_agent: Annotated[int, Field(ge=10, le=10_000_000)] = 50_000
    # Room for one agent's whole table: a stream that ends flushes every flow of its agent at once,
    # and with analysis on its own core that burst should wait, not be dropped.
    analysis_queue: Annotated[int, Field(ge=1, le=10_000_000)] = 50_000
    max_payload_bytes: Annotated[int, Field(ge=0, le=1 << 20)] = 65535
    samples_per_flow: Annotated[int, Field(ge=0, le=1024)] = 8
    sample_bytes: Annotated[int, Field(ge=0, le=65535)] = 2048
    dns_per_flow: Annotated[int, Field(ge=1, le=10_000)] = 64
    finished_flows_kept: Annotated[int, Field(ge=0, le=1_000_000)] = 2000


class FlowTimeoutSettings(_Section):
    """Seconds; see the README table for where each default comes from."""

    tcp_idle: Annotated[float, Field(gt=0, le=86400)] = 300.0
    udp_idle: Annotated[float, Field(gt=0, le=86400)] = 60.0
    dns_idle: Annotated[float, Field(gt=0, le=86400)] = 10.0
    icmp_idle: Annotated[float, Field(gt=0, le=86400)] = 60.0
    other_idle: Annotated[float, Field(gt=0, le=86400)] = 60.0
    active: Annotated[float, Field(gt=0, le=7 * 86400)] = 1800.0
    dns_active: Annotated[float, Field(gt=0, le=86400)] = 60.0


class AnalysisSettings(_Section):
    flow_timeouts: FlowTimeoutSettings = FlowTimeoutSettings()
    # process: analysis runs in a process of its own beside ingestion (the other core); thread: in the
    # server process (one process, one interpreter lock); off: flows are tracked and listed, never analysed
    # (measuring ingestion alone; a box that only collects).
    worker: Literal["process", "thread", "off"] = "process"
    # How much lower the analysis process's CPU priority is than the server's (nice increment): when both
    # want one core, ingestion goes first (an agent's buffer is finite, a lost packet is lost) and analysis
    # catches up from its queue (`limits.analysis_queue`).
    nice: Annotated[int, Field(ge=0, le=19)] = 5
    # With `worker: process` and two or more usable CPUs: the analysis process on the last one, the server's
    # threads on the others (`python -m appliance` applies it after start; appliance/cpus.py says why).
    pin_cpus: bool = True
    # MiB the analysis process (or a cluster analyzer) touches at start-up, two thirds as Python's object arenas,
    # a third as C heap, so that its state grows without a page fault per new page while flows wait
    # (appliance/analysis/memory.py); resident from the start, at most a quarter of what is available then. 0: none.
    memory_prefault_mb: Annotated[int, Field(ge=0, le=16384)] = 128
    sweep_interval: Annotated[float, Field(gt=0, le=60)] = 1.0
    # Detector tuning lives in the persisted analysis config (GET/POST /api/v1/config); these
    # values only seed it the first time the appliance starts.
    detectors: dict[str, Any] = Field(default_factory=dict)


class MetricsSettings(_Section):
    history_interval: Annotated[float, Field(gt=0, le=3600)] = 5.0


class ExportSettings(_Section):
    """The JSON-lines export of alerts and flow records for a SIEM shipper (docs/export.md)."""

    enabled: bool = False
    path: Path | None = None  # None: <paths.state_dir>/export/eve.json
    flows: bool = True
    alerts: bool = True
    max_bytes: Annotated[int, Field(ge=1 << 16, le=1 << 40)] = 100 << 20
    keep: Annotated[int, Field(ge=1, le=1000)] = 5
    queue: Annotated[int, Field(ge=100, le=10_000_000)] = 100_000

    @field_validator("path", mode="before")
    @classmethod
    def _a_file(cls, value: Any) -> Any:
        if isinstance(value, str) and (not value.strip() or value.endswith("/")):
            raise ValueError("must name a file (the rotated files are <path>.1, <path>.2, ...)")
        return value


class TlsSettings(_Section):
    # Extra subject alternative names for the server certificate (DNS names or IP addresses).
    server_names: list[str] = Field(default_factory=list)
    agent_cert_days: Annotated[int, Field(ge=1, le=3650)] = 365


class EnrollmentSettings(_Section):
    base_url: str = ""  # default: https://<first server name>:<rest port>
    # Where enrolled agents stream; default https://<host of base_url>:<grpc port>.
    grpc_url: str = ""
    token_ttl_hours: Annotated[float, Field(gt=0, le=24 * 365)] = 24.0
    product: Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")] = "SensorAgent"

    @field_validator("base_url", "grpc_url")
    @classmethod
    def _plain_url(cls, value: str) -> str:
        if value and not re.fullmatch(r"https?://[A-Za-z0-9.:\[\]-]+(/[A-Za-z0-9._~/-]*)?", value):
            raise ValueError("must be a plain http(s)://host[:port][/path] URL (no query, quotes or spaces)")
        return value.rstrip("/")


class ArtifactSettings(_Section):
    max_upload_bytes: Annotated[int, Field(ge=1024, le=4 * 1024 * 1024 * 1024)] = 512 * 1024 * 1024


class ReleaseSettings(_Section):
    url: str = ""  # release host base URL; reprovisioning is off while empty
    timeout: Annotated[float, Field(gt=0, le=600)] = 30.0
    # CA bundle that signs the release host's certificate; empty: the system's trust store.
    ca_file: str = ""


def _ipv4_networks(value: list[str]) -> list[str]:
    out = []
    for text in value:
        try:
            out.append(str(ipaddress.IPv4Network(text, strict=False)))
        except ValueError:
            raise ValueError(f"{text[:64]!r} is not an IPv4 network (a.b.c.d/len)") from None
    return out


class PortCaptureSettings(_Section):
    """The appliance's own port capture (README, "Port capture"); the console's capture defaults are elsewhere."""

    # A mirror port has no side of its own: a packet's side inside these networks is the local one.
    internal_networks: Annotated[list[str], Field(max_length=256)] = Field(
        default_factory=lambda: ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"])
    # child: the appliance runs the capture process itself (needs CAP_NET_RAW); service: sensor-capture.service does.
    runner: Literal["child", "service"] = "child"
    restart_backoff_initial: Annotated[float, Field(gt=0, le=60)] = 0.5
    restart_backoff_max: Annotated[float, Field(gt=0, le=3600)] = 30.0

    _networks = field_validator("internal_networks")(_ipv4_networks)

    @model_validator(mode="after")
    def _backoff_order(self) -> PortCaptureSettings:
        if self.restart_backoff_initial > self.restart_backoff_max:
            raise ValueError("capture.restart_backoff_initial must not exceed capture.restart_backoff_max")
        return self


def _default_node_id() -> str:
    import os
    import socket

    return f"{socket.gethostname()}-{os.getpid()}"


class ClusterSettings(_Section):
    """Roles on Redis Streams when one box is outgrown (README, "Cluster"); standalone needs no Redis."""

    # standalone: one box (ingest and analysis here); ingest: gRPC and flow table, flow records to Redis;
    # analyzer: analysis of the partitions it leases; manager: alert store, REST and console fed from Redis.
    role: Literal["standalone", "ingest", "analyzer", "manager"] = "standalone"
    redis_url: Annotated[str, Field(pattern=r"^(redis|rediss|unix)://[^\s'\"]{1,500}$")] = "redis://127.0.0.1:6379/0"
    # Every node must agree (the first to connect records it in Redis; a node that disagrees refuses to run).
    partitions: Annotated[int, Field(ge=1, le=4096)] = 16
    stream_maxlen: Annotated[int, Field(ge=1, le=100_000_000)] = 100_000  # entries per partition stream
    lease_seconds: Annotated[float, Field(ge=1, le=600)] = 10.0
    checkpoint_seconds: Annotated[float, Field(ge=0.5, le=3600)] = 10.0
    # How long an analysed flow id is remembered (an ingest node's retry after a lost reply comes within seconds).
    dedupe_seconds: Annotated[float, Field(ge=1, le=86400)] = 120.0
    node_id: Annotated[str, Field(pattern=r"^[A-Za-z0-9._:-]{1,128}$")] = Field(default_factory=_default_node_id)


class Settings(_Section):
    """The whole configuration."""

    grpc: GrpcSettings = GrpcSettings()
    rest: RestSettings = RestSettings()
    dashboard: DashboardSettings = DashboardSettings()
    paths: PathSettings = PathSettings()
    limits: LimitSettings = LimitSettings()
    analysis: AnalysisSettings = AnalysisSettings()
    metrics: MetricsSettings = MetricsSettings()
    tls: TlsSettings = TlsSettings()
    enrollment: EnrollmentSettings = EnrollmentSettings()
    artifacts: ArtifactSettings = ArtifactSettings()
    release: ReleaseSettings = ReleaseSettings()
    export: ExportSettings = ExportSettings()
    capture: PortCaptureSettings = PortCaptureSettings()
    cluster: ClusterSettings = ClusterSettings()


def describe_errors(err: ValidationError, source: str) -> str:
    """One line per problem: `source: key.path: reason (got value)`."""
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "<root>"
        reason = "unknown key" if e["type"] == "extra_forbidden" else e["msg"]
        lines.append(f"{source}: {key}: {reason} (got {e.get('input')!r})")
    return "\n".join(lines)


def parse_settings(data: Any, source: str = "config") -> Settings:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of sections (got {type(data).__name__})")
    try:
        return Settings.model_validate(data)
    except ValidationError as err:
        raise ConfigError(describe_errors(err, source)) from None


def check_paths(settings: Settings, source: str) -> Settings:
    """Stop on a signatures directory that does not exist: an empty rule set must be a choice, not a typo."""
    rules = settings.paths.signatures_dir
    if rules.is_dir():
        return settings
    if "signatures_dir" in settings.paths.model_fields_set:
        raise ConfigError(f"{source}: paths.signatures_dir: no such directory (got '{rules}'); create it, or remove "
                          f"the key to use the shipped rules in {SHIPPED_RULES}")
    raise ConfigError(f"{source}: the shipped rules are missing ({rules}): set paths.signatures_dir to the "
                      "directory of your rules")


def load_settings(path: str | Path | None) -> Settings:
    """Settings from a YAML file, or all defaults when `path` is None; the signatures directory must exist."""
    if path is None:
        return check_paths(Settings(), "defaults")
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"{path}: cannot read: {err.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    return check_paths(parse_settings(data, str(path)), str(path))
