"""A minimal classic-pcap reader (Ethernet/IPv4, TCP/UDP/ICMP) that turns a capture into the
NetworkPackets an agent on one host would stream (direction relative to that host)."""

from __future__ import annotations

import socket
import struct
from pathlib import Path

from appliance.generated import sensor_pb2
from tests.appliance import wire

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "pcaps"


def read_pcap(path: Path) -> list[tuple[int, bytes]]:
    """(timestamp in ms, frame) for each record; microsecond or nanosecond little/big-endian files."""
    data = path.read_bytes()
    magic = data[:4]
    endian = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    nano = magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
    (linktype,) = struct.unpack(endian + "I", data[20:24])
    assert linktype == 1, f"{path.name}: only Ethernet captures are supported (linktype {linktype})"
    out = []
    offset = 24
    while offset + 16 <= len(data):
        sec, frac, incl, _orig = struct.unpack(endian + "IIII", data[offset : offset + 16])
        offset += 16
        ms = sec * 1000 + (frac // 1_000_000 if nano else frac // 1000)
        out.append((ms, data[offset : offset + incl]))
        offset += incl
    return out


def to_packets(path: Path, host: str) -> list[sensor_pb2.NetworkPacket]:
    """The IPv4 packets to or from `host`, as that host's agent would send them."""
    packets = []
    for ms, frame in read_pcap(path):
        if frame[12:14] != b"\x08\x00":
            continue
        ip = frame[14:]
        ihl = (ip[0] & 0x0F) * 4
        total = struct.unpack("!H", ip[2:4])[0]
        proto = ip[9]
        src, dst = socket.inet_ntoa(ip[12:16]), socket.inet_ntoa(ip[16:20])
        if host not in (src, dst):
            continue
        outbound = src == host
        remote = dst if outbound else src
        l4 = ip[ihl:total]
        direction = wire.OUTBOUND if outbound else wire.INBOUND
        if proto == 17 and len(l4) >= 8:
            sport, dport = struct.unpack("!HH", l4[:4])
            lport, rport = (sport, dport) if outbound else (dport, sport)
            payload = l4 if outbound else l4[8:]  # outbound UDP keeps its header, per the contract
            packets.append(wire.packet(host, remote, lport, rport, 17, ms, direction, total, payload))
        elif proto == 6 and len(l4) >= 20:
            sport, dport = struct.unpack("!HH", l4[:4])
            lport, rport = (sport, dport) if outbound else (dport, sport)
            doff = (l4[12] >> 4) * 4
            packets.append(wire.packet(host, remote, lport, rport, 6, ms, direction, total, l4[doff:], l4[13]))
        elif proto == 1:
            packets.append(wire.packet(host, remote, 0, 0, 1, ms, direction, total, l4))
    return packets
