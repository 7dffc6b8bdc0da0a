"""IngestService: the domain operations behind the gRPC streams."""

from __future__ import annotations

import logging
import threading
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass

from appliance.agent_registry import AgentRegistry, AgentState
from appliance.errors import ApplianceError
from appliance.flows.tracker import FlowTracker
from appliance.ingest.convert import PacketConverter, dns_event_to_message
from appliance.ingest.identity import AgentIdentity
from appliance.model import DnsMessage

log = logging.getLogger(__name__)


class TooManyStreams(ApplianceError):
    """The agent identity already holds `max_streams_per_agent` open streams."""


def stream_owner(identity: AgentIdentity) -> str:
    """Whose streams count together: the client certificate under mTLS, else the agent id.

    The machine id is the agent's own claim and costs nothing to vary; a certificate does not.
    """
    return "cert:" + identity.cert_fingerprint if identity.cert_fingerprint else "agent:" + identity.agent_id


@dataclass(slots=True)
class StreamSession:
    """One open stream of one agent."""

    identity: AgentIdentity
    agent: AgentState
    accepted: int = 0
    rejected: int = 0


class IngestService:
    """Converts, counts and tracks what agents stream; shared by every gRPC stream."""

    def __init__(
        self,
        converter: PacketConverter,
        tracker: FlowTracker,
        agents: AgentRegistry,
        on_dns_event: Callable[[str, DnsMessage], None] | None = None,
        on_stream_closed: Callable[[], None] | None = None,
        process_history: int = 1000,
        max_streams_per_agent: int = 0,
    ) -> None:
        self.converter = converter
        self.tracker = tracker
        self.agents = agents
        self._on_dns_event = on_dns_event
        # Called after every stream's end (the agent's last one flushes its flows): the hand-off sends what waits
        # without gathering.
        self._on_stream_closed = on_stream_closed
        # DNS answers seen in packets feed the resolver cache before their flow ends (TLS checks need them).
        self._lock = threading.Lock()
        self.packets_received = 0
        self.bytes_received = 0  # serialized packet bytes agents streamed (the console's totalBytes)
        self.packets_rejected = 0
        self.events_received = 0
        self.events_rejected = 0
        self.events_malformed = 0  # event messages that did not decode (skipped; the stream goes on)
        self.streams_refused = 0  # streams refused at max_streams_per_agent
        self._max_streams_per_agent = max_streams_per_agent  # 0: no cap of its own
        self._streams: Counter[str] = Counter()  # open streams per stream_owner
        self._process_history = process_history
        self.process_events: dict[str, deque[dict[str, object]]] = {}
        self.file_events: dict[str, deque[dict[str, object]]] = {}

    def open(self, identity: AgentIdentity) -> StreamSession:
        """Start a stream of `identity`; TooManyStreams when its owner already holds its cap."""
        owner = stream_owner(identity)
        with self._lock:
            if self._max_streams_per_agent and self._streams[owner] >= self._max_streams_per_agent:
                self.streams_refused += 1
                refused = True
            else:
                self._streams[owner] += 1
                refused = False
        if refused:
            self.agents.stream_refused(identity.agent_id)
            log.warning("stream refused agent=%s peer=%s reason=max_streams_per_agent (%d)", identity.agent_id,
                        identity.remote_address, self._max_streams_per_agent)
            raise TooManyStreams(f"this agent already holds {self._max_streams_per_agent} streams")
        state = self.agents.stream_opened(identity)
        self.tracker.stream_opened(identity.agent_id)
        log.info("stream opened agent=%s host=%s peer=%s", identity.agent_id, identity.hostname, identity.remote_address)
        return StreamSession(identity, state)

    def close(self, session: StreamSession) -> None:
        """The stream ended or broke: flush the agent's flows into analysis."""
        owner = stream_owner(session.identity)
        with self._lock:
            self._streams[owner] -= 1
            if self._streams[owner] <= 0:
                del self._streams[owner]
        self.tracker.stream_closed(session.identity.agent_id)
        if self._on_stream_closed is not None:
            self._on_stream_closed()
        self.agents.stream_closed(session.identity.agent_id)
        log.info(
            "stream closed agent=%s accepted=%d rejected=%d",
            session.identity.agent_id, session.accepted, session.rejected,
        )

    def packet_bytes(self, session: StreamSession, data: bytes, batched: bool) -> None:
        """Convert and track one serialized PacketBatch (or NetworkPacket) of one stream."""
        accepted, rejected = self.tracker.add_wire(session.identity.agent_id, data, batched)
        self._count_packets(session, accepted, rejected, len(data))

    def _count_packets(self, session: StreamSession, accepted: int, rejected: int, nbytes: int = 0) -> None:
        with self._lock:
            self.packets_received += accepted
            self.bytes_received += nbytes
            self.packets_rejected += rejected
        session.accepted += accepted
        session.rejected += rejected
        self.agents.record(session.agent, accepted, rejected)

    def dns_event(self, session: StreamSession, message: object) -> None:
        converted = dns_event_to_message(message)
        self._count_event(session, converted is not None)
        if converted is not None and self._on_dns_event is not None:
            self._on_dns_event(session.identity.agent_id, converted)

    def malformed_event(self, session: StreamSession) -> None:
        """An event message that did not decode: skipped and counted, the stream goes on."""
        with self._lock:
            self.events_malformed += 1
            self.events_rejected += 1
        session.rejected += 1
        self.agents.event_malformed(session.agent)

    def _event_ring(self, table: dict[str, deque[dict[str, object]]], agent_id: str) -> deque[dict[str, object]]:
        ring = table.get(agent_id)
        if ring is None:
            ring = table[agent_id] = deque(maxlen=self._process_history)
        return ring

    def process_event(self, session: StreamSession, event: dict[str, object]) -> None:
        ok = bool(event.get("pid")) and event.get("kind") in ("start", "exit")
        self._count_event(session, ok)
        if ok:
            self._event_ring(self.process_events, session.identity.agent_id).append(event)

    def file_event(self, session: StreamSession, event: dict[str, object]) -> None:
        ok = bool(event.get("path")) and event.get("kind") in ("read", "write", "rename")
        self._count_event(session, ok)
        if ok:
            self._event_ring(self.file_events, session.identity.agent_id).append(event)

    def recent_events(self, agent_id: str, kind: str) -> list[dict[str, object]]:
        """The agent's recent process ("processes") or file ("files") events, oldest first."""
        table = self.process_events if kind == "processes" else self.file_events
        return list(table.get(agent_id, ()))

    def _count_event(self, session: StreamSession, ok: bool) -> None:
        with self._lock:
            if ok:
                self.events_received += 1
            else:
                self.events_rejected += 1
        if ok:
            session.accepted += 1
        else:
            session.rejected += 1
        self.agents.record(session.agent, 0, 0)

    @property
    def rejected_by_reason(self) -> dict[str, int]:
        return dict(self.converter.rejected)

    @property
    def repaired_by_reason(self) -> dict[str, int]:
        return dict(self.converter.repaired)
