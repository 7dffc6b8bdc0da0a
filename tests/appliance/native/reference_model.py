"""Reference model of the ingestion hot path: the pure-Python converter and flow tracker that
the C fast path (appliance/native/fastpath.c) replaced, kept verbatim as a test oracle.

The differential tests feed the same packets to both and require the same flows, counters and
rejection reasons. Do not "fix" this file to match the C code: it is the specification.

One deliberate change since (issue 19): `snapshot` lists the flows a packet updated most recently
(arrival order, kept here as one table-wide recency list), no longer the newest by `last_ns`, so that
the C table can answer from the tails of its update-ordered lists without scanning every flow.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

from appliance.flows.tracker import (
    CLASS_DNS, CLASS_OTHER, CLASS_UDP, CLASSES, END_ACTIVE, END_EVICTED, END_FULL, END_IDLE,
    END_SHUTDOWN, END_STREAM, END_TCP_CLOSE, FlowIds, FlowLimits, FlowTimeouts,
)
from appliance.flows.dns import resolves
from appliance.flows.packets import RawPacket, expand
from appliance.ingest.convert import (
    FIX_PAYLOAD_TRUNCATED, FIX_SHORT_HEADER, FIX_TIMESTAMP, REJECT_BAD_DIRECTION, REJECT_BAD_PORT,
    REJECT_BAD_PROTOCOL, REJECT_ZERO_ADDRESS, ConvertLimits,
)
from appliance.model import TCP_FIN, TCP_RST, DnsMessage, FlowRecord, Transport

_OUTBOUND = 1
_INBOUND = 2
_UDP_HEADER = 8
_NS = 1_000_000_000
_FIN_OUT = 1
_FIN_IN = 2
_CLASS_BY_PROTOCOL = {6: "tcp", 17: "udp", 1: "icmp"}
_TRANSPORTS = {6: Transport.TCP, 17: Transport.UDP, 1: Transport.ICMP}


class ReferenceConverter:
    """Turns `NetworkPacket` messages into packets, counting rejections and repairs."""

    def __init__(self, limits: ConvertLimits | None = None) -> None:
        self.limits = limits or ConvertLimits()
        self._max_payload = self.limits.max_payload_bytes
        self._future_ns = self.limits.future_tolerance_ns
        self.rejected: dict[str, int] = {}
        self.repaired: dict[str, int] = {}

    def _count(self, table: dict[str, int], reason: str) -> None:
        table[reason] = table.get(reason, 0) + 1

    def read(self, messages: Iterable[object], now_ns: int | None = None) -> list[RawPacket]:
        """Validate a batch of NetworkPacket messages into raw packets; rejected ones are counted.

        This runs once per packet, so every field is read once into a local and the common case
        takes no branch it does not need. Parsing of DNS and ICMP is left to `expand()`, which
        the tracker calls only for the packets it keeps (samples and DNS).
        """
        if now_ns is None:
            now_ns = time.time_ns()
        horizon = now_ns + self._future_ns
        max_payload = self._max_payload
        out: list[RawPacket] = []
        append = out.append
        for pb in messages:
            local_ip = pb.local_ip  # type: ignore[attr-defined]
            remote_ip = pb.remote_ip  # type: ignore[attr-defined]
            direction = pb.direction  # type: ignore[attr-defined]
            protocol = pb.protocol  # type: ignore[attr-defined]
            if not local_ip or not remote_ip or (direction != _OUTBOUND and direction != _INBOUND) or protocol > 255:
                self._count(self.rejected, _reject_reason(local_ip, remote_ip, direction))
                continue
            if protocol == 6 or protocol == 17:
                local_port = pb.local_port  # type: ignore[attr-defined]
                remote_port = pb.remote_port  # type: ignore[attr-defined]
                if local_port > 65535 or remote_port > 65535:
                    self._count(self.rejected, REJECT_BAD_PORT)
                    continue
            else:
                local_port = remote_port = 0
            timestamp_ns = pb.timestamp * 1_000_000  # type: ignore[attr-defined]
            if timestamp_ns == 0 or timestamp_ns > horizon:
                timestamp_ns = now_ns
                self._count(self.repaired, FIX_TIMESTAMP)
            payload = pb.payload  # type: ignore[attr-defined]
            if len(payload) > max_payload:
                payload = payload[:max_payload]
                self._count(self.repaired, FIX_PAYLOAD_TRUNCATED)
            if protocol == 17 and direction == _OUTBOUND:
                # The contract keeps the UDP header on outbound payloads; strip it once, here.
                if len(payload) >= _UDP_HEADER:
                    payload = payload[_UDP_HEADER:]
                else:
                    payload = b""
                    self._count(self.repaired, FIX_SHORT_HEADER)
            elif protocol == 1 and 0 < len(payload) < 4:
                self._count(self.repaired, FIX_SHORT_HEADER)
            process_name = pb.process_name  # type: ignore[attr-defined]
            if len(process_name) > 256:
                process_name = process_name[:256]
            append((
                timestamp_ns, direction, protocol, local_ip, remote_ip, local_port, remote_port,
                pb.size, payload, pb.tcp_flags, pb.pid, process_name,  # type: ignore[attr-defined]
            ))
        return out




def _reject_reason(local_ip: int, remote_ip: int, direction: int) -> str:
    if not local_ip or not remote_ip:
        return REJECT_ZERO_ADDRESS
    if direction != _OUTBOUND and direction != _INBOUND:
        return REJECT_BAD_DIRECTION
    return REJECT_BAD_PROTOCOL



class _AgentFlows:
    """The live flows of one agent, with its event clock."""

    __slots__ = ("agent_id", "clock_ns", "wall", "tables", "fins", "streams")

    def __init__(self, agent_id: str) -> None:
        self.agent_id = agent_id
        self.clock_ns = 0
        self.wall = time.monotonic()
        self.tables: dict[str, OrderedDict[tuple, FlowRecord]] = {c: OrderedDict() for c in CLASSES}
        self.fins: dict[tuple, int] = {}  # TCP flows that saw a FIN, by key -> directions seen
        self.streams = 0

    def count(self) -> int:
        return sum(len(t) for t in self.tables.values())


class ReferenceFlowTracker:
    """Aggregates packets into flows and hands every finished flow to `on_expire` once."""

    def __init__(
        self,
        on_expire: Callable[[list[FlowRecord]], None],
        timeouts: FlowTimeouts | None = None,
        limits: FlowLimits | None = None,
        on_dns_responses: Callable[[list[tuple[str, DnsMessage]]], None] | None = None,
        flow_ids: FlowIds | None = None,
    ) -> None:
        self._on_expire = on_expire
        self._next_id = flow_ids or FlowIds()
        # DNS answers are wanted as they arrive (the resolver cache must know a name was resolved
        # before the connection to its address is analysed); they come from the one parse here.
        self._on_dns_responses = on_dns_responses
        self._ended: list[FlowRecord] = []
        self.timeouts = timeouts or FlowTimeouts()
        self.limits = limits or FlowLimits()
        self._idle_ns = self.timeouts.idle_ns()
        self._active_ns = int(self.timeouts.active * _NS)
        self._dns_active_ns = int(self.timeouts.dns_active * _NS)
        self._agents: dict[str, _AgentFlows] = {}
        # Every live flow by id, in the order packets last updated them (least recent first).
        self._recent: OrderedDict[str, FlowRecord] = OrderedDict()
        self._count = 0
        self.lock = threading.Lock()
        self.flows_created = 0
        self.flows_expired = 0
        self.flows_evicted = 0

    # -- ingestion (hot path) -------------------------------------------------------------
    def add_packets(self, agent_id: str, packets: Iterable[RawPacket]) -> None:
        """Account a batch of one agent's raw packets, then expire what their event time ended.

        The hot path: a full `Packet` is built only for packets the flow keeps (the first
        payload-bearing ones as samples, and DNS messages); all others only touch counters.
        """
        with self.lock:
            agent = self._agents.get(agent_id)
            if agent is None:
                agent = self._agents[agent_id] = _AgentFlows(agent_id)
            tables = agent.tables
            clock = agent.clock_ns
            limits = self.limits
            samples_cap = limits.samples_per_flow
            sample_bytes = limits.sample_bytes
            dns_cap = limits.dns_per_flow
            active_ns = self._active_ns
            class_of = _CLASS_BY_PROTOCOL.get
            for raw in packets:
                ts, direction, protocol, local_ip, remote_ip, local_port, remote_port, size, payload, flags, pid, _ = raw
                key = (protocol, local_ip, local_port, remote_ip, remote_port)
                is_dns = remote_port == 53 or local_port == 53
                cls = class_of(protocol, CLASS_OTHER)
                if cls is CLASS_UDP and is_dns:
                    cls = CLASS_DNS
                table = tables[cls]
                flow = table.get(key)
                if flow is None:
                    if self._count >= limits.max_flows:
                        self._evict_oldest()
                    flow = FlowRecord(
                        self._next_id(), agent_id, protocol, _TRANSPORTS.get(protocol, Transport.OTHER),
                        local_ip, local_port, remote_ip, remote_port, ts, ts,
                    )
                    table[key] = flow
                    self._recent[flow.flow_id] = flow
                    self._count += 1
                    self.flows_created += 1
                else:
                    table.move_to_end(key)
                    self._recent.move_to_end(flow.flow_id)
                    if ts > flow.last_ns:
                        flow.last_ns = ts
                    elif ts < flow.first_ns:
                        flow.first_ns = ts
                if ts > clock:
                    clock = ts
                if direction == _OUTBOUND:
                    flow.packets_out += 1
                    flow.bytes_out += size
                    flow.payload_bytes_out += len(payload)
                else:
                    flow.packets_in += 1
                    flow.bytes_in += size
                    flow.payload_bytes_in += len(payload)
                if payload:
                    sample = len(flow.samples) < samples_cap
                    if sample or is_dns:
                        pkt = expand(raw)
                        message = pkt.dns
                        if message is not None:
                            if resolves(message) and self._on_dns_responses is not None:
                                self._on_dns_responses([(agent_id, message)])
                            if len(flow.dns) < dns_cap:
                                flow.dns.append(message)
                        if sample:
                            if len(payload) > sample_bytes:
                                pkt.payload = payload[:sample_bytes]
                            flow.samples.append(pkt)
                        if is_dns and len(flow.dns) >= dns_cap:
                            # Full: analyse what it holds now and let the socket's next queries
                            # start a new record, rather than drop them.
                            self._end(table, key, END_FULL)
                            continue
                if pid and not flow.pid:
                    flow.pid = pid
                    flow.process_name = raw[11]
                if flags:
                    flow.tcp_flags |= flags
                    if flags & (TCP_RST | TCP_FIN) and self._tcp_closed(agent, key, flags, direction):
                        self._end(table, key, END_TCP_CLOSE)
                        continue
                if flow.last_ns - flow.first_ns >= (self._dns_active_ns if is_dns else active_ns):
                    self._end(table, key, END_ACTIVE)
            agent.clock_ns = clock
            agent.wall = time.monotonic()
            self._expire_idle(agent, clock)
            self._hand_off()

    def _tcp_closed(self, agent: _AgentFlows, key: tuple, flags: int, direction: int) -> bool:
        if flags & TCP_RST:
            agent.fins.pop(key, None)
            return True
        seen = agent.fins.get(key, 0) | (_FIN_OUT if direction == _OUTBOUND else _FIN_IN)
        if seen == _FIN_OUT | _FIN_IN:
            del agent.fins[key]
            return True
        agent.fins[key] = seen
        return False

    # -- expiry -------------------------------------------------------------------------------
    def _end(self, table: OrderedDict[tuple, FlowRecord], key: tuple, reason: str) -> None:
        flow = table.pop(key)
        del self._recent[flow.flow_id]
        self._count -= 1
        flow.end_reason = reason
        if reason == END_EVICTED:
            self.flows_evicted += 1
        else:
            self.flows_expired += 1
        agent = self._agents.get(flow.agent_id)
        if agent is not None and agent.fins:
            agent.fins.pop(key, None)
        self._ended.append(flow)

    def _hand_off(self) -> None:
        if self._ended:
            ended, self._ended = self._ended, []
            self._on_expire(ended)

    def _expire_idle(self, agent: _AgentFlows, clock_ns: int) -> None:
        for cls, table in agent.tables.items():
            if not table:
                continue
            horizon = clock_ns - self._idle_ns[cls]
            while table:
                key, flow = next(iter(table.items()))
                if flow.last_ns > horizon:
                    break
                self._end(table, key, END_IDLE)

    def _evict_oldest(self) -> None:
        """Evict the flow idle longest (in its agent's event time) to make room under the cap."""
        best: tuple[int, OrderedDict[tuple, FlowRecord], tuple] | None = None
        for agent in self._agents.values():
            for table in agent.tables.values():
                if table:
                    key, flow = next(iter(table.items()))
                    idle = agent.clock_ns - flow.last_ns
                    if best is None or idle > best[0]:
                        best = (idle, table, key)
        if best is not None:
            self._end(best[1], best[2], END_EVICTED)

    def sweep(self, now_wall: float | None = None) -> None:
        """Advance the event clock of quiet agents by the wall time they were quiet, and expire."""
        now_wall = time.monotonic() if now_wall is None else now_wall
        with self.lock:
            for agent in list(self._agents.values()):
                quiet = now_wall - agent.wall
                if quiet >= 1.0:
                    agent.clock_ns += int(quiet * _NS)
                    agent.wall = now_wall
                    self._expire_idle(agent, agent.clock_ns)
                if not agent.streams and not agent.count():
                    del self._agents[agent.agent_id]
            self._hand_off()

    # -- streams ------------------------------------------------------------------------------
    def stream_opened(self, agent_id: str) -> None:
        with self.lock:
            agent = self._agents.get(agent_id)
            if agent is None:
                agent = self._agents[agent_id] = _AgentFlows(agent_id)
            agent.streams += 1

    def stream_closed(self, agent_id: str) -> None:
        """A stream ended or broke: when it was the agent's last one, flush all its flows."""
        with self.lock:
            agent = self._agents.get(agent_id)
            if agent is None:
                return
            agent.streams = max(0, agent.streams - 1)
            if agent.streams == 0:
                self._flush_agent(agent, END_STREAM)
                del self._agents[agent_id]
            self._hand_off()

    def flush_all(self, reason: str = END_SHUTDOWN) -> None:
        with self.lock:
            for agent in list(self._agents.values()):
                self._flush_agent(agent, reason)
            self._hand_off()

    def _flush_agent(self, agent: _AgentFlows, reason: str) -> None:
        for table in agent.tables.values():
            while table:
                self._end(table, next(iter(table)), reason)

    # -- queries (REST) -------------------------------------------------------------------
    @property
    def active_flows(self) -> int:
        return self._count

    def snapshot(self, agent_id: str | None = None, limit: int = 100) -> list[FlowRecord]:
        """The `limit` live flows a packet updated most recently, most recent first, optionally of one agent."""
        with self.lock:
            wanted = agent_id or None
            flows = (f for f in reversed(self._recent.values()) if wanted is None or f.agent_id == wanted)
            return list(itertools.islice(flows, max(limit, 0)))

    def find(self, wanted_id: str) -> FlowRecord | None:
        with self.lock:
            for agent in self._agents.values():
                for table in agent.tables.values():
                    for flow in table.values():
                        if flow.flow_id == wanted_id:
                            return flow
        return None
