"""Core routes: status, metrics, flows, agents, and the OpenAPI document."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from appliance import __version__
from appliance.agents import AgentRegistry, AgentState
from appliance.errors import NotFound
from appliance.flows.finished import FinishedFlows
from appliance.flows.tracker import FlowTracker, community_id
from appliance.metrics import MetricsCollector, MetricsHistory
from appliance.model import FlowRecord
from appliance.rest.api import Api, query_choice, query_int, query_str


def iso_ns(ns: int) -> str:
    return dt.datetime.fromtimestamp(ns / 1e9, dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def iso_s(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


class StatusReply(BaseModel):
    status: str
    version: str
    warnings: list[str]  # e.g. an active blanket exclusion; empty when all is well


class FlowReply(BaseModel):
    id: str
    community_id: str
    agent_id: str
    state: str
    end_reason: str
    protocol: int
    transport: str
    local_ip: str
    local_port: int
    remote_ip: str
    remote_port: int
    first_seen: str
    last_seen: str
    duration_s: float
    packets_out: int
    packets_in: int
    bytes_out: int
    bytes_in: int
    tcp_flags: int
    pid: int
    process_name: str
    dns_queries: list[str]


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


def flow_view(flow: FlowRecord, state: str) -> dict[str, Any]:
    queries: list[str] = []
    for message in flow.dns:
        if message.qname and message.qname not in queries:
            queries.append(message.qname)
            if len(queries) >= 20:
                break
    return {
        "id": flow.flow_id,
        "community_id": community_id(flow.protocol, flow.local_ip, flow.local_port, flow.remote_ip, flow.remote_port),
        "agent_id": flow.agent_id,
        "state": state,
        "end_reason": flow.end_reason,
        "protocol": flow.protocol,
        "transport": flow.transport.name.lower(),
        "local_ip": flow.local_addr,
        "local_port": flow.local_port,
        "remote_ip": flow.remote_addr,
        "remote_port": flow.remote_port,
        "first_seen": iso_ns(flow.first_ns),
        "last_seen": iso_ns(flow.last_ns),
        "duration_s": round(flow.duration_s, 3),
        "packets_out": flow.packets_out,
        "packets_in": flow.packets_in,
        "bytes_out": flow.bytes_out,
        "bytes_in": flow.bytes_in,
        "tcp_flags": flow.tcp_flags,
        "pid": flow.pid,
        "process_name": flow.process_name,
        "dns_queries": queries,
    }


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

    @api.route("GET", "/api/v1/metrics", "Current counters")
    def metrics() -> dict[str, Any]:
        return collector.snapshot()

    @api.route("GET", "/api/v1/metrics/history", "The last 120 metric snapshots, oldest first")
    def metrics_history() -> dict[str, Any]:
        entries = history.entries()
        return {"interval_s": history.interval, "count": len(entries), "entries": entries}

    @api.route(
        "GET", "/api/v1/flows", "Live and recently finished flows, newest first", reply=FlowList,
        query={"agent_id": "only this agent's flows", "state": "active or finished (default both)",
               "limit": "1-1000, default 100"},
    )
    def flows() -> dict[str, Any]:
        agent_id = query_str("agent_id", 64)
        state = query_choice("state", {"active", "finished"})
        limit = query_int("limit", 100, 1, 1000)
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
        query={"kind": "processes (default) or files", "limit": "1-1000, default 100"},
    )
    def agent_events(agent_id: str) -> dict[str, Any]:
        if agents.get(agent_id) is None:
            raise NotFound(f"No agent with id {agent_id[:64]!r}")
        kind = query_choice("kind", {"processes", "files"}) or "processes"
        limit = query_int("limit", 100, 1, 1000)
        items = events(agent_id, kind)[-limit:][::-1]
        return {"agent_id": agent_id, "kind": kind, "events": items, "count": len(items)}

    @api.route("GET", "/api/v1/openapi.json", "This API's OpenAPI 3.1 document")
    def openapi_document() -> dict[str, Any]:
        return openapi()
