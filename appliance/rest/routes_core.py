"""Core routes: status, metrics, flows, agents, and the OpenAPI document."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from appliance import __version__
from appliance.agent_registry import AgentRegistry, AgentState
from appliance.detection.dpi.tls_meta import opens_handshake
from appliance.detection.facts import tls_metadata
from appliance.errors import NotFound
from appliance.flows.finished import FinishedFlows
from appliance.flows.record_codec import expanded
from appliance.flows.tracker import FlowTracker, community_id
from appliance.metrics import MetricsCollector, MetricsHistory
from appliance.model import FlowRecord
from appliance.rest.api import LIMIT, Api, Param


def iso_ns(ns: int) -> str:
    return dt.datetime.fromtimestamp(ns / 1e9, dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def iso_s(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


class StatusReply(BaseModel):
    status: str
    version: str
    warnings: list[str]  # e.g. an active blanket exclusion; empty when all is well


class AnalysisWorkerStatus(BaseModel):
    """Where analysis runs and how it fares (metrics `analysis_worker`)."""

    mode: Literal["process", "thread", "off", "ingest", "manager"]  # ingest, manager: cluster roles (README, "Cluster")
    running: bool
    pid: int = 0  # the analysis process (mode process)
    restarts: int  # times the analysis process died and was started again
    flows_lost: int  # flows handed to an analysis process that died before it confirmed them
    dns_dropped: int = 0  # DNS answers and resolver events over the channel's bound
    flows_not_analysed: int = 0  # mode off: every ended flow
    frames_refused: int = 0  # channel frames the analysis process could not read (a bug, never silent)
    # The rule set analysis runs (the analysis process watches the rule files itself; `signature_rules` above
    # is the server's own engine, which serves /api/v1/rules): 0 where this node does not analyse.
    signature_rules: int = 0
    signature_reloads: int = 0  # good reloads since analysis started (a restarted process counts from 0)
    cpus: list[int] = []  # the CPUs the analysis process is pinned to (analysis.pin_cpus); empty: not pinned
    channel_buffer: int = 0  # mode process: the send buffer the kernel granted the channel, in bytes (it reports double)
    memory_reserved: int = 0  # mode process: bytes the analysis process touched at start-up (analysis.memory_prefault_mb)
    cluster: dict[str, int] = {}  # cluster roles: what this node did with Redis (README, "Cluster")


class MetricsReply(BaseModel):
    """GET /api/v1/metrics: the collector's sources (appliance/app.py) plus the throughput meter's fields.

    A new counter in the collector is a new line here (the tests hold every reply to this model)."""

    timestamp: float
    packets_received: int
    packets_rejected: int
    events_received: int
    events_rejected: int
    events_malformed: int
    streams_refused_per_agent: int
    active_flows: int
    flows_created: int
    flows_processed: int
    flows_evicted: int
    flows_evicted_agent_cap: int
    flows_refused_bucket: int
    analysis_queue_depth: int
    analysis_queue_oldest_s: float  # how long the oldest flow waiting for analysis has waited (0.0: none waits)
    analysis_queue_dropped: int
    analysis_dropped_by_agent: dict[str, int]
    analysis_errors: int
    analysis_worker: AnalysisWorkerStatus
    detections_generated: int
    detections_suppressed: int
    alerts_generated: int
    active_alerts: int
    signature_rules: int
    alerts_updated: int
    agents_online: int
    rejected_by_reason: dict[str, int]
    repaired_by_reason: dict[str, int]
    rest_connections: dict[str, int]  # open_connections and refusals by reason ({} before the server runs)
    blanket_exclusions: int
    retention_alerts_deleted: int
    retention_flows_deleted: int
    tls_handshakes: int
    tls_handshakes_incomplete: int
    tls_handshakes_unreadable: int
    tls_certificates_unreadable: int
    export: dict[str, int]  # the alert export's written/dropped/rotations/write_errors/queued ({} when off)
    # The console's throughput fields (metrics.ThroughputMeter)
    totalPackets: int
    totalBytes: int
    packetsPerSecond: float
    bytesPerSecond: float
    activeThreats: int
    captureUptime: float


class MetricsHistoryReply(BaseModel):
    interval_s: float
    count: int
    entries: list[MetricsReply]


class FlowCertificate(BaseModel):
    subject: str
    issuer: str
    dns_names: list[str]
    ip_names: list[str]
    not_before: str
    not_after: str
    self_signed: bool
    key_type: str
    key_bits: int
    sha256: str


class FlowTls(BaseModel):
    ja4: str
    ja4s: str
    ja3: str
    sni: str
    alpn: str
    client_version: str
    server_version: str
    cipher: str
    complete: bool
    certificate: FlowCertificate | None  # the server's leaf certificate, when it was sent in clear (TLS <= 1.2)
    chain_length: int


class FlowReply(BaseModel):
    """One flow. The fields below the line are copied from the `FlowRecord` attribute of the same name,
    so a new flow attribute reaches the API with one line here; the ones above are derived in `flow_view`."""

    id: str
    community_id: str
    state: Literal["active", "finished"]
    transport: str
    local_ip: str
    remote_ip: str
    first_seen: str
    last_seen: str
    duration_s: float
    dns_queries: list[str]
    tls: FlowTls | None  # from analysis, or read from the samples of a flow still queued for it
    # -- copied from FlowRecord --
    agent_id: str
    end_reason: str
    protocol: int
    local_port: int
    remote_port: int
    packets_out: int
    packets_in: int
    bytes_out: int
    bytes_in: int
    tcp_flags: int
    pid: int
    process_name: str


_FLOW_DERIVED = frozenset({"id", "community_id", "state", "transport", "local_ip", "remote_ip", "first_seen",
                           "last_seen", "duration_s", "dns_queries", "tls"})
_FLOW_COPIED = tuple(name for name in FlowReply.model_fields if name not in _FLOW_DERIVED)


class FlowList(BaseModel):
    flows: list[FlowReply]
    count: int


class AgentReply(BaseModel):
    id: str
    hostname: str
    os: str
    version: str
    status: str
    packets_received: int
    packets_rejected: int
    dropped_by_agent: int
    analysis_dropped: int  # this agent's flows dropped by the full analysis queue (its fair share used up)
    streams_refused: int  # streams refused because the agent held grpc.max_streams_per_agent
    events_malformed: int  # DNS/process/file event messages that could not be decoded (skipped)
    first_seen: str
    last_seen: str
    remote_address: str


class AgentList(BaseModel):
    agents: list[AgentReply]
    count: int


class ProcessEvent(BaseModel):
    """A process start or exit an agent streamed (ingest/servicer.py)."""

    model_config = ConfigDict(extra="forbid")  # tells the two event kinds apart
    kind: Literal["start", "exit"]
    timestamp_ms: int
    pid: int
    ppid: int
    name: str
    path: str
    command_line: str
    user: str
    exit_code: int


class FileEvent(BaseModel):
    """A file read, write or rename an agent streamed (ingest/servicer.py)."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["read", "write", "rename"]
    timestamp_ms: int
    pid: int
    process_name: str
    path: str
    new_path: str
    bytes: int


class AgentEvents(BaseModel):
    agent_id: str
    kind: Literal["processes", "files"]
    events: list[ProcessEvent | FileEvent]
    count: int


class OpenApiDocument(BaseModel):
    """The OpenAPI 3.1 document itself (its schema is OpenAPI's own)."""

    openapi: str
    info: dict[str, Any]
    paths: dict[str, Any]
    components: dict[str, Any]


def flow_view(flow: FlowRecord, state: str) -> dict[str, Any]:
    queries: list[str] = []
    for message in flow.dns:
        if message.qname and message.qname not in queries:
            queries.append(message.qname)
            if len(queries) >= 20:
                break
    view = {name: getattr(flow, name) for name in _FLOW_COPIED}
    view.update({
        "id": flow.flow_id,
        "community_id": community_id(flow.protocol, flow.local_ip, flow.local_port, flow.remote_ip, flow.remote_port),
        "state": state,
        "transport": flow.transport.name.lower(),
        "local_ip": flow.local_addr,
        "remote_ip": flow.remote_addr,
        "first_seen": iso_ns(flow.first_ns),
        "last_seen": iso_ns(flow.last_ns),
        "duration_s": round(flow.duration_s, 3),
        "dns_queries": queries,
        "tls": _tls_view(flow),
    })
    return view


def _tls_view(flow: FlowRecord) -> dict[str, Any] | None:
    if flow.tls is not None:  # set by analysis; a flow still queued for analysis is read from its samples here
        return flow.tls
    flow = expanded(flow)  # a finished flow may hold its samples as the flow table wrote them
    if not flow.samples or not opens_handshake(flow):
        return None
    meta = tls_metadata(flow)
    return meta.view() if meta is not None else None


def agent_view(agent: AgentState) -> dict[str, Any]:
    return {
        "id": agent.agent_id,
        "hostname": agent.hostname,
        "os": agent.os,
        "version": agent.version,
        "status": agent.status,
        "packets_received": agent.packets_received,
        "packets_rejected": agent.packets_rejected,
        "dropped_by_agent": agent.dropped_by_agent,
        "analysis_dropped": agent.analysis_dropped,
        "streams_refused": agent.streams_refused,
        "events_malformed": agent.events_malformed,
        "first_seen": iso_s(agent.first_seen),
        "last_seen": iso_s(agent.last_seen),
        "remote_address": agent.remote_address,
    }


def install(
    api: Api,
    *,
    collector: MetricsCollector,
    history: MetricsHistory,
    tracker: FlowTracker,
    finished: FinishedFlows,
    agents: AgentRegistry,
    events: Callable[[str, str], list[dict[str, Any]]],
    openapi: Callable[[], dict[str, Any]],
    warnings: Callable[[], list[str]] = list,
) -> None:
    """Declare the core routes on `api`."""

    @api.route("GET", "/api/status", "Liveness and version", public=True, reply=StatusReply)
    def status() -> dict[str, Any]:
        return {"status": "Running", "version": __version__, "warnings": warnings()}

    @api.route("GET", "/api/v1/metrics", "Current counters", reply=MetricsReply)
    def metrics() -> dict[str, Any]:
        return collector.snapshot()

    @api.route("GET", "/api/v1/metrics/history", "The last 120 metric snapshots, oldest first", reply=MetricsHistoryReply)
    def metrics_history() -> dict[str, Any]:
        entries = history.entries()
        return {"interval_s": history.interval, "count": len(entries), "entries": entries}

    @api.route(
        "GET", "/api/v1/flows", "Live and recently finished flows, newest first", reply=FlowList,
        query={"agent_id": Param.text("only this agent's flows", 64),
               "state": Param.choice("active or finished (default both)", ("active", "finished")), "limit": LIMIT},
    )
    def flows(query: dict[str, Any]) -> dict[str, Any]:
        agent_id, state, limit = query["agent_id"], query["state"], query["limit"]
        items: list[dict[str, Any]] = []
        if state in (None, "active"):
            items.extend(flow_view(f, "active") for f in tracker.snapshot(agent_id, limit))
        if state in (None, "finished"):
            items.extend(flow_view(f, "finished") for f in finished.newest(agent_id, limit))
        items.sort(key=lambda f: f["last_seen"], reverse=True)
        items = items[:limit]
        return {"flows": items, "count": len(items)}

    @api.route("GET", "/api/v1/flows/<flow_id>", "One flow by id", reply=FlowReply)
    def flow(flow_id: str) -> dict[str, Any]:
        live = tracker.find(flow_id)
        if live is not None:
            return flow_view(live, "active")
        done = finished.find(flow_id)
        if done is not None:
            return flow_view(done, "finished")
        raise NotFound(f"No flow with id {flow_id[:64]!r}")

    @api.route("GET", "/api/v1/agents", "Agents that have streamed to this appliance", reply=AgentList)
    def agent_list() -> dict[str, Any]:
        items = [agent_view(a) for a in agents.all()]
        return {"agents": items, "count": len(items)}

    @api.route("GET", "/api/v1/agents/<agent_id>", "One agent", reply=AgentReply)
    def agent_detail(agent_id: str) -> dict[str, Any]:
        agent = agents.get(agent_id)
        if agent is None:
            raise NotFound(f"No agent with id {agent_id[:64]!r}")
        return agent_view(agent)

    @api.route(
        "GET", "/api/v1/agents/<agent_id>/events", "Recent process or file events an agent streamed, newest first",
        query={"kind": Param.choice("processes (default) or files", ("processes", "files"), "processes"), "limit": LIMIT},
        reply=AgentEvents,
    )
    def agent_events(agent_id: str, query: dict[str, Any]) -> dict[str, Any]:
        if agents.get(agent_id) is None:
            raise NotFound(f"No agent with id {agent_id[:64]!r}")
        kind, limit = query["kind"], query["limit"]
        items = events(agent_id, kind)[-limit:][::-1]
        return {"agent_id": agent_id, "kind": kind, "events": items, "count": len(items)}

    @api.route("GET", "/api/v1/openapi.json", "This API's OpenAPI 3.1 document", reply=OpenApiDocument)
    def openapi_document() -> dict[str, Any]:
        return openapi()
