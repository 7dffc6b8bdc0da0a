"""Conversion of wire messages (generated protobuf classes) into the appliance's own types.

This is the only module, with the servicer, that touches generated classes. A packet that cannot
be used is rejected with a reason; one that can be partly used is converted best effort and the
repair is counted. Nothing here raises on bad input.
"""

from __future__ import annotations

import time
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


class PacketConverter:
    """Turns `NetworkPacket` messages into `Packet`s, counting rejections and repairs."""

    def __init__(self, limits: ConvertLimits | None = None) -> None:
        self.limits = limits or ConvertLimits()
        self.rejected: dict[str, int] = {}
        self.repaired: dict[str, int] = {}

    def _count(self, table: dict[str, int], reason: str) -> None:
        table[reason] = table.get(reason, 0) + 1

    def convert(self, pb: object, now_ns: int | None = None) -> Packet | None:
        """Convert one NetworkPacket; None when it is rejected (the reason is counted)."""
        local_ip = pb.local_ip  # type: ignore[attr-defined]
        remote_ip = pb.remote_ip  # type: ignore[attr-defined]
        if not local_ip or not remote_ip:
            self._count(self.rejected, REJECT_ZERO_ADDRESS)
            return None
        direction = pb.direction  # type: ignore[attr-defined]
        if direction != _OUTBOUND and direction != _INBOUND:
            self._count(self.rejected, REJECT_BAD_DIRECTION)
            return None
        protocol = pb.protocol  # type: ignore[attr-defined]
        if protocol > 255:
            self._count(self.rejected, REJECT_BAD_PROTOCOL)
            return None
        transport = _TRANSPORTS.get(protocol, Transport.OTHER)
        if transport is Transport.TCP or transport is Transport.UDP:
            local_port = pb.local_port  # type: ignore[attr-defined]
            remote_port = pb.remote_port  # type: ignore[attr-defined]
            if local_port > 65535 or remote_port > 65535:
                self._count(self.rejected, REJECT_BAD_PORT)
                return None
        else:
            local_port = remote_port = 0

        timestamp_ns = pb.timestamp * 1_000_000  # type: ignore[attr-defined]
        if now_ns is None:
            now_ns = time.time_ns()
        if timestamp_ns == 0 or timestamp_ns > now_ns + self.limits.future_tolerance_ns:
            timestamp_ns = now_ns
            self._count(self.repaired, FIX_TIMESTAMP)

        payload = pb.payload  # type: ignore[attr-defined]
        if len(payload) > self.limits.max_payload_bytes:
            payload = payload[: self.limits.max_payload_bytes]
            self._count(self.repaired, FIX_PAYLOAD_TRUNCATED)

        dns = None
        icmp = None
        if transport is Transport.UDP:
            if direction == _OUTBOUND:
                # The contract keeps the UDP header on outbound payloads; strip it once, here.
                if len(payload) >= _UDP_HEADER:
                    payload = payload[_UDP_HEADER:]
                else:
                    payload = b""
                    self._count(self.repaired, FIX_SHORT_HEADER)
            if (remote_port == _DNS_PORT or local_port == _DNS_PORT) and payload:
                dns = parse_dns(payload, timestamp_ns)
        elif transport is Transport.TCP:
            if (remote_port == _DNS_PORT or local_port == _DNS_PORT) and payload:
                dns = parse_dns_tcp(payload, timestamp_ns)
        elif transport is Transport.ICMP:
            if len(payload) >= 4:
                icmp = IcmpInfo(payload[0], payload[1], payload[4:])
            elif payload:
                self._count(self.repaired, FIX_SHORT_HEADER)

        return Packet(
            timestamp_ns,
            direction,
            protocol,
            transport,
            local_ip,
            remote_ip,
            local_port,
            remote_port,
            pb.size,  # type: ignore[attr-defined]
            payload,
            pb.tcp_flags,  # type: ignore[attr-defined]
            pb.pid,  # type: ignore[attr-defined]
            pb.process_name[:256],  # type: ignore[attr-defined]
            dns,
            icmp,
        )


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
