"""Conversion of wire messages (generated protobuf classes) into the appliance's own types.

This is the only module, with the servicer, that touches generated classes. A packet that cannot
be used is rejected with a reason; one that can be partly used is converted best effort and the
repair is counted. Nothing here raises on bad input.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from appliance.ingest.dns import parse_dns, parse_dns_tcp
from appliance.model import DnsAnswer, DnsMessage, IcmpInfo, Packet, Transport

_TRANSPORTS = {1: Transport.ICMP, 6: Transport.TCP, 17: Transport.UDP}
_OUTBOUND = 1
_INBOUND = 2
_UDP_HEADER = 8
_DNS_PORT = 53

# Reasons a packet is rejected outright (counted per reason in metrics).
REJECT_ZERO_ADDRESS = "zero_address"
REJECT_BAD_DIRECTION = "bad_direction"
REJECT_BAD_PORT = "bad_port"
REJECT_BAD_PROTOCOL = "bad_protocol"
# Repairs made to a packet that is kept.
FIX_TIMESTAMP = "timestamp_replaced"
FIX_PAYLOAD_TRUNCATED = "payload_truncated"
FIX_SHORT_HEADER = "short_header"


@dataclass(slots=True)
class ConvertLimits:
    """Bounds applied while converting."""

    max_payload_bytes: int = 65535
    future_tolerance_ns: int = 600 * 1_000_000_000  # agents' clocks may run a little ahead


# A validated packet in its lean form, as the flow tracker consumes it on the hot path:
# (timestamp_ns, direction, protocol, local_ip, remote_ip, local_port, remote_port, size,
#  payload, tcp_flags, pid, process_name). The payload is already cut to the limit and, for
# outbound UDP, stripped of its UDP header. `expand()` turns one into a full `Packet`.
RawPacket = tuple


class PacketConverter:
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

    def convert(self, pb: object, now_ns: int | None = None) -> Packet | None:
        """Convert one NetworkPacket into a full Packet; None when it is rejected (counted)."""
        raw = self.read((pb,), now_ns)
        return expand(raw[0]) if raw else None


def expand(raw: RawPacket) -> Packet:
    """The full Packet of a raw packet: transport, and DNS or ICMP metadata parsed."""
    ts, direction, protocol, local_ip, remote_ip, local_port, remote_port, size, payload, flags, pid, name = raw
    dns = None
    icmp = None
    if payload:
        if protocol == 17:
            if remote_port == _DNS_PORT or local_port == _DNS_PORT:
                dns = parse_dns(payload, ts)
        elif protocol == 6:
            if remote_port == _DNS_PORT or local_port == _DNS_PORT:
                dns = parse_dns_tcp(payload, ts)
        elif protocol == 1 and len(payload) >= 4:
            icmp = IcmpInfo(payload[0], payload[1], payload[4:])
    return Packet(
        ts, direction, protocol, _TRANSPORTS.get(protocol, Transport.OTHER), local_ip, remote_ip,
        local_port, remote_port, size, payload, flags, pid, name, dns, icmp,
    )


def _reject_reason(local_ip: int, remote_ip: int, direction: int) -> str:
    if not local_ip or not remote_ip:
        return REJECT_ZERO_ADDRESS
    if direction != _OUTBOUND and direction != _INBOUND:
        return REJECT_BAD_DIRECTION
    return REJECT_BAD_PROTOCOL


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
