"""Builders of wire messages for tests: NetworkPacket, DNS payloads, UDP headers."""

from __future__ import annotations

import struct
import time

from appliance.generated import sensor_pb2
from appliance.model import ip_int

OUTBOUND = sensor_pb2.OUTBOUND
INBOUND = sensor_pb2.INBOUND


def udp_header(sport: int, dport: int, payload: bytes) -> bytes:
    return struct.pack("!HHHH", sport, dport, 8 + len(payload), 0)


def dns_name(name: str) -> bytes:
    out = b""
    for label in name.rstrip(".").split("."):
        raw = label.encode()
        out += bytes([len(raw)]) + raw
    return out + b"\x00"


def dns_query(name: str, qtype: int = 1, ident: int = 0x1234) -> bytes:
    return struct.pack("!HHHHHH", ident, 0x0100, 1, 0, 0, 0) + dns_name(name) + struct.pack("!HH", qtype, 1)


def dns_response(name: str, answers: list[tuple[int, bytes]], qtype: int = 1, ident: int = 0x1234,
                 rcode: int = 0, ttl: int = 300) -> bytes:
    """A response whose answers use a compression pointer to the question name (offset 12)."""
    head = struct.pack("!HHHHHH", ident, 0x8180 | rcode, 1, len(answers), 0, 0)
    body = dns_name(name) + struct.pack("!HH", qtype, 1)
    for rtype, rdata in answers:
        body += b"\xc0\x0c" + struct.pack("!HHIH", rtype, 1, ttl, len(rdata)) + rdata
    return head + body


def now_ms() -> int:
    return int(time.time() * 1000)


def packet(local: str = "10.0.0.5", remote: str = "93.184.216.34", lport: int = 40000, rport: int = 443,
           protocol: int = 6, ts_ms: int | None = None, direction: int = OUTBOUND, size: int = 0,
           payload: bytes = b"", flags: int = 0, pid: int = 0, process: str = "") -> sensor_pb2.NetworkPacket:
    """A NetworkPacket as an agent sends it (for outbound UDP, pass the payload *with* its UDP header)."""
    return sensor_pb2.NetworkPacket(
        local_ip=ip_int(local), remote_ip=ip_int(remote), local_port=lport, remote_port=rport,
        protocol=protocol, timestamp=now_ms() if ts_ms is None else ts_ms, direction=direction,
        size=size or (40 + len(payload)), payload=payload, tcp_flags=flags, pid=pid, process_name=process,
    )


def udp_out(local: str, remote: str, lport: int, rport: int, data: bytes, ts_ms: int | None = None) -> sensor_pb2.NetworkPacket:
    return packet(local, remote, lport, rport, 17, ts_ms, OUTBOUND, 28 + len(data), udp_header(lport, rport, data) + data)


def udp_in(local: str, remote: str, lport: int, rport: int, data: bytes, ts_ms: int | None = None) -> sensor_pb2.NetworkPacket:
    return packet(local, remote, lport, rport, 17, ts_ms, INBOUND, 28 + len(data), data)
