"""Conversion of wire messages into the appliance's own types.

Packets arrive as serialized protobuf bytes and are parsed and validated in C
(`appliance.native.fastpath`), by the rules listed in the README ("Ingestion rules"). A packet
that cannot be used is rejected with a reason; one that can be partly used is converted best
effort and the repair is counted. Nothing here raises on bad input.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from appliance.flows.packets import RawPacket, expand
from appliance.model import DnsAnswer, DnsMessage, Packet
from appliance.native.fastpath import WireReader

# Reasons a packet is rejected outright (counted per reason in metrics).
REJECT_ZERO_ADDRESS = "zero_address"
REJECT_BAD_DIRECTION = "bad_direction"
REJECT_BAD_PORT = "bad_port"
REJECT_BAD_PROTOCOL = "bad_protocol"
REJECT_MALFORMED = "malformed_message"  # broken protobuf encoding
# Repairs made to a packet that is kept.
FIX_TIMESTAMP = "timestamp_replaced"
FIX_PAYLOAD_TRUNCATED = "payload_truncated"
FIX_SHORT_HEADER = "short_header"
FIX_PROCESS_NAME = "process_name_replaced"  # not UTF-8: decoded with U+FFFD


@dataclass(slots=True)
class ConvertLimits:
    """Bounds applied while converting."""

    max_payload_bytes: int = 65535
    future_tolerance_ns: int = 600 * 1_000_000_000  # agents' clocks may run a little ahead




class PacketConverter:
    """Turns NetworkPacket messages into raw packets, counting rejections and repairs.

    The parsing and the rules run in C (`appliance.native.fastpath.WireReader`), straight from
    the serialized bytes gRPC received; tests/appliance/ingest/test_convert.py exercises it rule
    by rule and tests/appliance/native checks it against the pure-Python reference.
    """

    def __init__(self, limits: ConvertLimits | None = None) -> None:
        self.limits = limits or ConvertLimits()
        self.wire = WireReader(self.limits.max_payload_bytes, self.limits.future_tolerance_ns)

    @property
    def rejected(self) -> dict[str, int]:
        return self.wire.rejected

    @property
    def repaired(self) -> dict[str, int]:
        return self.wire.repaired

    def read_wire(self, data: bytes, batched: bool, now_ns: int | None = None) -> list[RawPacket]:
        """Validate the packets of one serialized PacketBatch (or one NetworkPacket) into raw packets.

        A packet whose encoding is broken is rejected as `malformed_message`; when the framing of
        the batch itself breaks, the rest of that batch is dropped and counted once.
        """
        return self.wire.read(data, batched, time.time_ns() if now_ns is None else now_ns)

    def read(self, messages: Iterable[object], now_ns: int | None = None) -> list[RawPacket]:
        """Validate generated NetworkPacket objects (tests and tools; the servicer reads bytes)."""
        now_ns = time.time_ns() if now_ns is None else now_ns
        out: list[RawPacket] = []
        for pb in messages:
            out += self.wire.read(pb.SerializeToString(), False, now_ns)  # type: ignore[attr-defined]
        return out

    def convert(self, pb: object, now_ns: int | None = None) -> Packet | None:
        """Convert one NetworkPacket into a full Packet; None when it is rejected (counted)."""
        raw = self.read((pb,), now_ns)
        return expand(raw[0]) if raw else None


def dns_event_to_message(pb: object, now_ns: int | None = None) -> DnsMessage | None:
    """Convert a resolver `DnsEvent` into a DnsMessage (a response); None when it has no query."""
    query = pb.query.strip().rstrip(".").lower()[:255]  # type: ignore[attr-defined]
    if not query:
        return None
    timestamp_ns = pb.timestamp * 1_000_000 or (now_ns if now_ns is not None else time.time_ns())  # type: ignore[attr-defined]
    answers = [
        DnsAnswer(a.name.rstrip(".").lower()[:255], a.type, a.ttl, a.data[:1024])
        for a in pb.answers[:32]  # type: ignore[attr-defined]
    ]
    return DnsMessage(
        id=0,
        is_response=True,
        rcode=pb.rcode & 0xF,  # type: ignore[attr-defined]
        qname=query,
        qtype=pb.query_type & 0xFFFF,  # type: ignore[attr-defined]
        qclass=1,
        answers=answers,
        timestamp_ns=timestamp_ns,
    )
