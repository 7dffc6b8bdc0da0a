"""FlowTracker: aggregates packets into flows per agent and 5-tuple, on event time.

Flows live in one list per agent and per timeout class, in least-recently-updated order, so
idle expiry pops from the front instead of scanning, and the flows updated last, which a snapshot
lists, are at the tails; the lists and a hash of the 5-tuples are kept in C
(appliance/native/fastpath.c) because they are touched once per packet. Every
agent has its own event clock (the newest packet timestamp it sent) so a replayed capture expires
exactly like live traffic; a wall-clock sweep advances the clock of agents that went quiet.

Lifecycle of a flow (after NFStream): created on its first packet, updated per packet, expired by
idle timeout, active timeout, TCP close, stream end, eviction under the flow cap, or shutdown; an
expired flow is handed to `on_expire` (the analysis pipeline) exactly once. Flows ended by one
call are handed over together, as one list: waking the analysis thread once per flow would cost
more than tracking the flow did.

Every flow record gets its own id (`FlowIds`): the 5-tuple hash is the same for a conversation's
successive records (cut by the active timeout, or the same ports reused later), so it is kept as
`community_id`, for pivoting, and never used to name one record.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import secrets
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from appliance.flows.dns import resolves
from appliance.flows.packets import RawPacket, dns_message, expand
from appliance.flows.record_codec import TRANSPORT_OF_PROTOCOL, AnyDns, EndedFlow, expand_samples, expanded, sample_mask
from appliance.model import FlowRecord
from appliance.native.fastpath import FlowTable, WireReader

_NS = 1_000_000_000

# Timeout classes. DNS over UDP gets its own short class: a resolver transaction is over in
# milliseconds, and DNS detections should not wait a minute for the flow to idle out.
CLASS_TCP = "tcp"
CLASS_UDP = "udp"
CLASS_DNS = "dns"
CLASS_ICMP = "icmp"
CLASS_OTHER = "other"
CLASSES = (CLASS_TCP, CLASS_UDP, CLASS_DNS, CLASS_ICMP, CLASS_OTHER)

END_IDLE = "idle"
END_ACTIVE = "active"
END_FULL = "dns_full"
END_TCP_CLOSE = "tcp_close"
END_STREAM = "stream_end"
END_EVICTED = "evicted"
END_SHUTDOWN = "shutdown"


@dataclass(frozen=True, slots=True)
class FlowTimeouts:
    """Idle timeouts per class and the active timeout, in seconds (see README for the rationale)."""

    tcp_idle: float = 300.0
    udp_idle: float = 60.0
    dns_idle: float = 10.0
    icmp_idle: float = 60.0
    other_idle: float = 60.0
    active: float = 1800.0
    # A DNS "flow" that lives long is one socket carrying many queries (a tunnel keeps its source
    # port): cut it every minute so DNS verdicts never wait for the 30-minute active timeout.
    dns_active: float = 60.0

    def idle_ns(self) -> dict[str, int]:
        return {
            CLASS_TCP: int(self.tcp_idle * _NS),
            CLASS_UDP: int(self.udp_idle * _NS),
            CLASS_DNS: int(self.dns_idle * _NS),
            CLASS_ICMP: int(self.icmp_idle * _NS),
            CLASS_OTHER: int(self.other_idle * _NS),
        }


@dataclass(frozen=True, slots=True)
class FlowLimits:
    """Memory bounds of the tracker."""

    max_flows: int = 200_000
    samples_per_flow: int = 8
    sample_bytes: int = 2048
    dns_per_flow: int = 64
    max_flows_per_agent: int = 0  # 0: only max_flows; else an agent at its cap evicts its own oldest flow
    # The IP protocols whose flows keep payload samples (None: every one). The server keeps only those analysis
    # reads (appliance.detection.SAMPLED_PROTOCOLS): a UDP flow's samples were copied per packet, encoded, handed
    # over and skipped unread; a DNS flow's messages are kept in `dns` either way.
    sampled_protocols: frozenset[int] | None = None


def flow_hash(protocol: int, ip_a: int, port_a: int, ip_b: int, port_b: int) -> bytes:
    """SHA-1 of the direction-normalised 5-tuple, laid out as Community ID v1 (seed 0)."""
    if (ip_a, port_a) > (ip_b, port_b):
        ip_a, port_a, ip_b, port_b = ip_b, port_b, ip_a, port_a
    return hashlib.sha1(struct.pack("!HIIBBHH", 0, ip_a, ip_b, protocol, 0, port_a, port_b)).digest()


# Drawn once per process: ids of an earlier run (kept in detections) are never handed out again.
PROCESS_PREFIX = secrets.token_hex(4)


class FlowIds:
    """Flow record ids: 20 hex characters, `prefix` (8) then a counter (12), never reused.

    Detections keep the ids of their flows in SQLite, so ids must not repeat after a restart: the
    default prefix is random per process (`PROCESS_PREFIX`), the counter orders ids within it. Trackers
    fed the same packets allocate the same ids (the differential tests rely on that); one process runs
    one tracker. A FlowTracker takes the prefix and counts in C (a flow that only C touches has no Python
    object until it ends); calling a FlowIds allocates the same sequence in Python.
    """

    def __init__(self, prefix: str | None = None) -> None:
        self.prefix = PROCESS_PREFIX if prefix is None else prefix
        self._counter = itertools.count(1)

    def __call__(self) -> str:
        return f"{self.prefix}{next(self._counter):012x}"


def community_id(protocol: int, ip_a: int, port_a: int, ip_b: int, port_b: int) -> str:
    """Community ID v1 string of the 5-tuple, for pivoting to Zeek and Suricata logs."""
    return "1:" + base64.b64encode(flow_hash(protocol, ip_a, port_a, ip_b, port_b)).decode()




class FlowTracker:
    """Aggregates packets into flows and hands every finished flow to `on_expire` once.

    The tables and the per-packet accounting live in C (`appliance.native.fastpath.FlowTable`);
    this class owns the domain around them: building a flow's record, keeping its samples and
    DNS messages, and handing ended flows over. Every call is serialised by `lock`.

    `reader` is the wire reader `add_wire` parses with (ingest's, which counts what it rejects);
    a tracker built without one is fed parsed packets only (`add_packets`).

    A flow's FlowRecord is made only when Python needs it (a snapshot, find, a kept DNS or ICMP packet,
    its end); the payload samples of flows that are not DNS are kept by C as flow record contract bytes
    (`FlowRecord.kept_wire`). With `ended_as_wire` (analysis in another process or on another box) a
    flow Python never held ends as a `WireFlow`, its record already in the contract's encoding, and a
    record ends with its samples as C wrote them; without, every ended flow is a FlowRecord with its
    samples expanded before `on_expire` sees it. `snapshot` and `find` always return records with every
    sample expanded.
    """

    def __init__(
        self,
        on_expire: Callable[[list[EndedFlow]], None],
        timeouts: FlowTimeouts | None = None,
        limits: FlowLimits | None = None,
        on_dns_responses: Callable[[list[tuple[str, AnyDns]]], None] | None = None,
        flow_ids: FlowIds | None = None,
        reader: WireReader | None = None,
        ended_as_wire: bool = False,
    ) -> None:
        self._on_expire = on_expire
        # DNS answers are wanted as they arrive (the resolver cache must know a name was resolved
        # before the connection to its address is analysed); they come from the one parse here, as
        # `AnyDns`: C's serialized, so that a hand-off to another process passes them on unread. Only
        # responses that resolve a name to an address (flows.dns.resolves), and one call per batch.
        self._on_dns_responses = on_dns_responses
        self.timeouts = timeouts or FlowTimeouts()
        self.limits = limits or FlowLimits()
        idle = self.timeouts.idle_ns()
        self._table = FlowTable(
            tuple(idle[c] for c in CLASSES), int(self.timeouts.active * _NS), int(self.timeouts.dns_active * _NS),
            self.limits.max_flows, self.limits.samples_per_flow, FlowRecord, self._keep,
            max_flows_per_agent=self.limits.max_flows_per_agent, reader=reader, sample_bytes=self.limits.sample_bytes,
            transports=TRANSPORT_OF_PROTOCOL, id_prefix=(flow_ids or FlowIds()).prefix, ended_as_wire=ended_as_wire,
            dns_per_flow=self.limits.dns_per_flow,
            sampled=None if self.limits.sampled_protocols is None else sample_mask(self.limits.sampled_protocols),
        )
        self._ended_as_wire = ended_as_wire
        self._sample_bytes = self.limits.sample_bytes
        self._dns_cap = self.limits.dns_per_flow
        self.lock = threading.Lock()

    def _keep(self, flow: FlowRecord, raw: RawPacket, sample: bool, is_dns: bool) -> bool:
        """Store a packet the flow keeps (a payload sample, a DNS message); True when a DNS flow is full.

        Called from C for the packets ICMP flows keep when analysis runs in this process (IcmpInfo is read from the
        uncut payload), and for a port-53 ICMP packet (read as DNS too); every other flow's samples and DNS messages,
        and ICMP's samples when flows end as contract bytes (`ended_as_wire`), are kept in C.
        """
        if sample:
            pkt = expand(raw)
            message = pkt.dns
        else:  # a DNS packet past the sample budget: only its message is kept
            message = dns_message(raw)
        if message is not None:
            if resolves(message):  # into the table's list, in packet order with the answers C parsed
                self._table.answers.append((flow.agent_id, message))
            if len(flow.dns) < self._dns_cap:
                flow.dns.append(message)
        if sample:
            if len(pkt.payload) > self._sample_bytes:
                pkt.payload = pkt.payload[: self._sample_bytes]
            flow.samples.append(pkt)
        # Full: analyse what it holds now and let the socket's next queries start a new record,
        # rather than drop them.
        return is_dns and len(flow.dns) >= self._dns_cap

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Run a table call under the lock, then hand over what it produced with the lock released.

        The C loop only records: DNS answers and ended flows are delivered after the call, outside the
        lock, so neither the resolver cache nor the analysis queue ever runs while ingestion waits.
        Answers first: the resolver must know a name before the connections to its address are analysed.
        """
        answers: list[tuple[str, AnyDns]] = []
        ended: list[EndedFlow] = []
        try:
            with self.lock:
                try:
                    yield
                finally:
                    ended = self._table.take_ended()
                    answers = self._table.take_answers()
                    if not self._ended_as_wire:
                        for record in ended:
                            expand_samples(record)
        finally:
            try:
                if answers and self._on_dns_responses is not None:
                    # C's are serialized DnsMessages, Python's (ICMP) objects: the consumer reads them if it needs to.
                    self._on_dns_responses(answers)
            finally:  # a failing resolver cache never costs the ended flows their analysis
                if ended:
                    self._on_expire(ended)

    # -- ingestion (hot path) -------------------------------------------------------------
    def add_packets(self, agent_id: str, packets: Iterable[RawPacket]) -> None:
        """Account a batch of one agent's raw packets, then expire what their event time ended."""
        with self._locked():
            self._table.add_packets(agent_id, packets)

    def add_wire(self, agent_id: str, data: bytes, batched: bool, now_ns: int | None = None) -> tuple[int, int]:
        """Parse, validate and account one serialized PacketBatch (or NetworkPacket) in one pass.

        The same as `add_packets(agent_id, reader.read(data, batched, now_ns))` with the reader the
        tracker was built with, without building a Python object per packet. Returns (accepted, rejected);
        TypeError when the tracker has no reader.
        """
        now_ns = time.time_ns() if now_ns is None else now_ns
        with self._locked():
            return self._table.add_wire(agent_id, data, batched, now_ns)

    # -- expiry -------------------------------------------------------------------------------
    def sweep(self, now_wall: float | None = None) -> None:
        """Advance the event clock of quiet agents by the wall time they were quiet, and expire."""
        now_wall = time.monotonic() if now_wall is None else now_wall
        with self._locked():
            self._table.sweep(now_wall)

    # -- streams ------------------------------------------------------------------------------
    def stream_opened(self, agent_id: str) -> None:
        with self.lock:
            self._table.stream_opened(agent_id)

    def stream_closed(self, agent_id: str) -> None:
        """A stream ended or broke: when it was the agent's last one, flush all its flows."""
        with self._locked():
            self._table.stream_closed(agent_id)

    def flush_all(self, reason: str = END_SHUTDOWN) -> None:
        with self._locked():
            self._table.flush_all(reason)

    # -- queries (REST) -------------------------------------------------------------------
    @property
    def active_flows(self) -> int:
        return self._table.count

    @property
    def flows_created(self) -> int:
        return self._table.created

    @property
    def flows_expired(self) -> int:
        return self._table.expired

    @property
    def flows_evicted(self) -> int:
        return self._table.evicted

    @property
    def flows_evicted_agent_cap(self) -> int:
        return self._table.evicted_agent_cap

    @property
    def flows_refused_bucket(self) -> int:
        return self._table.bucket_refused

    def longest_chain(self) -> int:
        """The longest hash chain of the flow table (walks it: tests and benchmarks only)."""
        with self.lock:
            return self._table.longest_chain

    def snapshot(self, agent_id: str | None = None, limit: int = 100) -> list[FlowRecord]:
        """The `limit` live flows a packet updated most recently, most recent first, optionally of one agent.

        The order is that of arrival, not of `last_ns`: a packet whose timestamp is older than its
        flow's newest still makes the flow the most recent one. Taken from the tails of the per-class
        lists, so the lock is held for the list tails plus `limit` flows, not for the whole table.
        """
        with self.lock:
            return [expanded(record) for record in self._table.snapshot(agent_id or None, limit)]

    def snapshot_visited(self) -> int:
        """How many flows the last snapshot looked at (tests: a snapshot must not walk the table)."""
        with self.lock:
            return self._table.snapshot_visited

    def find(self, wanted_id: str) -> FlowRecord | None:
        """The live flow of that id, its counters current (one chain of the table's id index)."""
        with self.lock:
            record = self._table.find(wanted_id)
            return expanded(record) if record is not None else None
