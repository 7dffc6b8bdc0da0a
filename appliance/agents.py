"""AgentRegistry: the agents that have streamed to this appliance, and whether they are online."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from appliance.ingest.identity import AgentIdentity


@dataclass(slots=True)
class AgentState:
    """What the appliance knows about one agent."""

    agent_id: str
    machine_id: str
    hostname: str
    os: str
    version: str
    remote_address: str
    first_seen: float
    last_seen: float
    packets_received: int = 0
    packets_rejected: int = 0
    dropped_by_agent: int = 0  # reported by the agent (x-agent-dropped) after reconnecting
    analysis_dropped: int = 0  # flows the analysis queue dropped (beyond the agent's fair share)
    streams_refused: int = 0  # streams refused at grpc.max_streams_per_agent
    events_malformed: int = 0  # event messages that could not be decoded
    streams: int = 0
    cert_fingerprints: set[str] = field(default_factory=set)

    @property
    def status(self) -> str:
        return "online" if self.streams > 0 else "offline"


class AgentRegistry:
    """Tracks agents by id; updated by ingestion, read by REST."""

    def __init__(self) -> None:
        self._agents: dict[str, AgentState] = {}
        self._lock = threading.Lock()

    def stream_opened(self, ident: AgentIdentity) -> AgentState:
        now = time.time()
        with self._lock:
            state = self._agents.get(ident.agent_id)
            if state is None:
                state = AgentState(
                    ident.agent_id, ident.machine_id, ident.hostname, ident.os, ident.version,
                    ident.remote_address, now, now,
                )
                self._agents[ident.agent_id] = state
            else:
                # The newest stream's self-description wins (hostname or version may change).
                state.hostname = ident.hostname or state.hostname
                state.os = ident.os or state.os
                state.version = ident.version or state.version
                state.remote_address = ident.remote_address
                state.last_seen = now
            if ident.cert_fingerprint:
                state.cert_fingerprints.add(ident.cert_fingerprint)
            state.dropped_by_agent += ident.reported_dropped
            state.streams += 1
            return state

    def stream_closed(self, agent_id: str) -> None:
        with self._lock:
            state = self._agents.get(agent_id)
            if state is not None:
                state.streams = max(0, state.streams - 1)
                state.last_seen = time.time()

    def record(self, state: AgentState, accepted: int, rejected: int) -> None:
        """Count a batch for an agent (called by the stream's own thread)."""
        with self._lock:
            state.packets_received += accepted
            state.packets_rejected += rejected
            state.last_seen = time.time()

    def analysis_dropped(self, agent_id: str, count: int) -> None:
        """The analysis queue dropped `count` of the agent's flows (the pipeline's `on_drop`)."""
        with self._lock:
            state = self._agents.get(agent_id)
            if state is not None:
                state.analysis_dropped += count

    def stream_refused(self, agent_id: str) -> None:
        """A stream of a known agent was refused at its cap (unknown agents are not created here)."""
        with self._lock:
            state = self._agents.get(agent_id)
            if state is not None:
                state.streams_refused += 1

    def event_malformed(self, state: AgentState) -> None:
        with self._lock:
            state.events_malformed += 1
            state.last_seen = time.time()

    def get(self, agent_id: str) -> AgentState | None:
        return self._agents.get(agent_id)

    def all(self) -> list[AgentState]:
        with self._lock:
            return sorted(self._agents.values(), key=lambda a: a.last_seen, reverse=True)

    @property
    def online(self) -> int:
        with self._lock:
            return sum(1 for a in self._agents.values() if a.streams > 0)
