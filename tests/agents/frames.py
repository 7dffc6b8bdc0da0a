"""Builders of frames and capture files for agent tests (written independently of the decoder)."""

from __future__ import annotations

import struct

from agents.model import ip_int
from tests.agents.lab_traffic import checksum  # the lab script is standard library only: the one copy lives there

ETH_SRC = bytes.fromhex("020000000001")
ETH_DST = bytes.fromhex("020000000002")


def ipv4(src: str, dst: str, proto: int, body: bytes, *, frag: int = 0, ident: int = 1) -> bytes:
    head = struct.pack("!BBHHHBBHII", 0x45, 0, 20 + len(body), ident, frag, 64, proto, 0, ip_int(src), ip_int(dst))
    head = head[:10] + struct.pack("!H", checksum(head)) + head[12:]
    return head + body


def udp(sport: int, dport: int, payload: bytes) -> bytes:
    return struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload


def tcp(sport: int, dport: int, payload: bytes, flags: int = 0x18, options: bytes = b"") -> bytes:
    doff = (20 + len(options)) // 4
    return struct.pack("!HHIIBBHHH", sport, dport, 1, 1, doff << 4, flags, 65535, 0, 0) + options + payload


def icmp_echo(ident: int, seq: int, data: bytes, kind: int = 8) -> bytes:
    return struct.pack("!BBHHH", kind, 0, 0, ident, seq) + data


def ethernet(packet: bytes, ethertype: int = 0x0800, vlan: int | None = None) -> bytes:
    tag = struct.pack("!HH", 0x8100, vlan) if vlan is not None else b""
    return ETH_DST + ETH_SRC + tag + struct.pack("!H", ethertype) + packet


def pcap_bytes(frames: list[tuple[int, bytes]], linktype: int = 1, *, big_endian: bool = False, nanos: bool = False) -> bytes:
    order = ">" if big_endian else "<"
    magic = 0xA1B23C4D if nanos else 0xA1B2C3D4
    out = struct.pack(order + "IHHiIII", magic, 2, 4, 0, 0, 65535, linktype)
    for ts_ns, data in frames:
        seconds, rest = divmod(ts_ns, 1_000_000_000)
        out += struct.pack(order + "IIII", seconds, rest if nanos else rest // 1000, len(data), len(data)) + data
    return out


def _block(order: str, kind: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    total = 12 + len(body)
    return struct.pack(order + "II", kind, total) + body + struct.pack(order + "I", total)


def pcapng_bytes(frames: list[tuple[int, bytes]], linktype: int = 1, *, big_endian: bool = False,
                 tsresol: int | None = None, simple: bool = False) -> bytes:
    """A pcapng file: SHB, one IDB (optionally with if_tsresol = 10^-tsresol), then EPBs (or SPBs)."""
    order = ">" if big_endian else "<"
    out = _block(order, 0x0A0D0D0A, struct.pack(order + "IHHq", 0x1A2B3C4D, 1, 0, -1))
    options = b""
    if tsresol is not None:
        options = struct.pack(order + "HH", 9, 1) + bytes([tsresol]) + b"\0\0\0" + struct.pack(order + "HH", 0, 0)
    out += _block(order, 1, struct.pack(order + "HHI", linktype, 0, 65535) + options)
    units = 10 ** (tsresol if tsresol is not None else 6)
    for ts_ns, data in frames:
        if simple:
            out += _block(order, 3, struct.pack(order + "I", len(data)) + data)
            continue
        ts = ts_ns * units // 1_000_000_000
        out += _block(order, 6, struct.pack(order + "IIIII", 0, ts >> 32, ts & 0xFFFFFFFF, len(data), len(data)) + data)
    return out
