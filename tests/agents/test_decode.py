"""The decoder turns frames into packets exactly per the contract in proto/sensor.proto."""

from __future__ import annotations

import random
import struct

import pytest

from agents.decode import (
    LINK_ETHERNET,
    LINK_LINUX_SLL,
    LINK_LINUX_SLL2,
    LINK_LOOP,
    LINK_NULL,
    LINK_RAW,
    PKT_HOST,
    PKT_OUTGOING,
    Decoder,
    DirectionResolver,
)
from agents.model import INBOUND, OUTBOUND, ip_int
from agents.pcapfile import read_capture
from tests.agents.conftest import PCAPS
from tests.agents.frames import ethernet, icmp_echo, ipv4, tcp, udp

HOST = "10.0.0.5"
PEER = "192.0.2.9"
TS_NS = 1_700_000_000_123_456_789


def decoder(*local: str, exclude: tuple[tuple[int, int], ...] = ()) -> Decoder:
    return Decoder(DirectionResolver([ip_int(a) for a in (local or (HOST,))]), exclude=exclude)


def test_outbound_udp_keeps_its_header_and_reports_ip_size() -> None:
    body = udp(40000, 53, b"query-bytes")
    packet = decoder().decode(LINK_ETHERNET, ethernet(ipv4(HOST, PEER, 17, body)), TS_NS)
    assert packet is not None
    assert packet.direction == OUTBOUND
    assert (packet.local_ip, packet.local_port, packet.remote_ip, packet.remote_port) == (ip_int(HOST), 40000, ip_int(PEER), 53)
    assert packet.payload == body  # 8-byte UDP header kept on outbound
    assert packet.size == 20 + len(body)
    assert packet.timestamp_ms == TS_NS // 1_000_000
    assert packet.protocol == 17


def test_inbound_udp_carries_only_the_payload() -> None:
    packet = decoder().decode(LINK_ETHERNET, ethernet(ipv4(PEER, HOST, 17, udp(53, 40000, b"answer"))), TS_NS)
    assert packet is not None
    assert packet.direction == INBOUND
    assert (packet.local_port, packet.remote_port) == (40000, 53)
    assert packet.payload == b"answer"


def test_tcp_payload_starts_after_options_and_flags_are_kept() -> None:
    segment = tcp(443, 51000, b"server-hello", flags=0x12, options=b"\x01\x01\x08\x0a" + b"\0" * 8)
    packet = decoder().decode(LINK_ETHERNET, ethernet(ipv4(PEER, HOST, 6, segment)), TS_NS)
    assert packet is not None
    assert packet.direction == INBOUND
    assert packet.payload == b"server-hello"
    assert packet.tcp_flags == 0x12
    assert (packet.local_port, packet.remote_port) == (51000, 443)


def test_icmp_payload_is_the_whole_icmp_message_without_ports() -> None:
    message = icmp_echo(7, 1, b"x" * 56)
    packet = decoder().decode(LINK_ETHERNET, ethernet(ipv4(HOST, PEER, 1, message)), TS_NS)
    assert packet is not None
    assert packet.payload == message
    assert (packet.local_port, packet.remote_port, packet.size) == (0, 0, 84)


def test_ethernet_padding_is_not_payload() -> None:
    frame = ethernet(ipv4(HOST, PEER, 6, tcp(5000, 80, b"", flags=0x10))) + b"\0" * 6  # padded to 60 bytes
    packet = decoder().decode(LINK_ETHERNET, frame, TS_NS)
    assert packet is not None and packet.payload == b"" and packet.size == 40


def test_snaplen_cut_keeps_the_wire_size() -> None:
    frame = ethernet(ipv4(HOST, PEER, 17, udp(1234, 9999, b"z" * 1000)))
    packet = decoder().decode(LINK_ETHERNET, frame[:200], TS_NS)
    assert packet is not None
    assert packet.size == 1028
    assert len(packet.payload) == 200 - 14 - 20


def test_vlan_tagged_frames_are_decoded() -> None:
    packet = decoder().decode(LINK_ETHERNET, ethernet(ipv4(HOST, PEER, 17, udp(1, 2, b"v")), vlan=42), TS_NS)
    assert packet is not None and packet.remote_port == 2


@pytest.mark.parametrize(("linktype", "prefix"), [
    (LINK_LINUX_SLL, struct.pack("!HHH8sH", 4, 1, 6, b"\0" * 8, 0x0800)),
    (LINK_LINUX_SLL2, struct.pack("!HHIHBB8s", 0x0800, 0, 2, 1, 4, 6, b"\0" * 8)),
    (LINK_NULL, struct.pack("<I", 2)),
    (LINK_NULL, struct.pack(">I", 2)),
    (LINK_LOOP, struct.pack(">I", 2)),
    (LINK_RAW, b""),
])
def test_cooked_loopback_and_raw_link_types(linktype: int, prefix: bytes) -> None:
    packet = decoder().decode(linktype, prefix + ipv4(HOST, PEER, 17, udp(5353, 53, b"q")), TS_NS)
    assert packet is not None
    assert (packet.direction, packet.remote_port) == (OUTBOUND, 53)


def test_linux_packet_type_decides_direction_when_addresses_do_not() -> None:
    d = Decoder(DirectionResolver())
    out = d.decode_network(0x0800, ipv4("10.1.1.1", "10.1.1.2", 17, udp(1000, 53, b"q")), 0, TS_NS, PKT_OUTGOING)
    back = d.decode_network(0x0800, ipv4("10.1.1.2", "10.1.1.1", 17, udp(53, 1000, b"a")), 0, TS_NS, PKT_HOST)
    assert out is not None and back is not None
    assert (out.direction, out.local_ip) == (OUTBOUND, ip_int("10.1.1.1"))
    assert (back.direction, back.local_ip) == (INBOUND, ip_int("10.1.1.1"))


def test_traffic_of_other_hosts_is_counted_not_sent() -> None:
    d = decoder()
    assert d.decode(LINK_ETHERNET, ethernet(ipv4("10.9.9.9", PEER, 17, udp(1, 2, b""))), TS_NS) is None
    assert d.stats.skipped == {"not_local": 1}


def test_ipv6_is_counted_and_skipped() -> None:
    v6 = bytes([0x60]) + b"\0" * 39
    d = decoder()
    assert d.decode(LINK_ETHERNET, ethernet(v6, ethertype=0x86DD), TS_NS) is None
    assert d.decode(LINK_RAW, v6, TS_NS) is None
    assert d.stats.skipped == {"ipv6": 2}


def test_own_stream_to_the_appliance_is_excluded_both_ways() -> None:
    appliance = (ip_int(PEER), 50051)
    d = decoder(exclude=(appliance,))
    assert d.decode(LINK_ETHERNET, ethernet(ipv4(HOST, PEER, 6, tcp(40000, 50051, b"grpc"))), TS_NS) is None
    assert d.decode(LINK_ETHERNET, ethernet(ipv4(PEER, HOST, 6, tcp(50051, 40000, b"grpc"))), TS_NS) is None
    assert d.decode(LINK_ETHERNET, ethernet(ipv4(HOST, PEER, 6, tcp(40000, 443, b"tls"))), TS_NS) is not None
    assert d.stats.skipped == {"excluded": 2}


def test_non_first_fragments_are_counted_and_skipped() -> None:
    d = decoder()
    assert d.decode(LINK_ETHERNET, ethernet(ipv4(HOST, PEER, 17, b"tail-of-datagram", frag=185)), TS_NS) is None
    assert d.stats.skipped == {"fragment": 1}


def test_malformed_headers_are_counted() -> None:
    d = decoder()
    bad_ihl = bytearray(ipv4(HOST, PEER, 17, udp(1, 2, b"")))
    bad_ihl[0] = 0x42
    bad_doff = bytearray(ipv4(HOST, PEER, 6, tcp(1, 2, b"")))
    bad_doff[20 + 12] = 0x20
    assert d.decode(LINK_RAW, bytes(bad_ihl), TS_NS) is None
    assert d.decode(LINK_RAW, bytes(bad_doff), TS_NS) is None
    assert d.decode(999, b"whatever", TS_NS) is None
    assert d.stats.skipped == {"malformed": 2, "non_ip": 1}


def test_every_truncation_and_random_corruption_of_real_frames_is_survived() -> None:
    frames = list(read_capture(PCAPS / "icmp-ping-and-ssh-benign.pcap"))[:40]
    frames += list(read_capture(PCAPS / "tls-c2-clienthello.pcap"))
    d = Decoder(DirectionResolver(infer=True))
    rng = random.Random(5)
    for frame in frames:
        for cut in range(len(frame.data) + 1):
            d.decode(frame.linktype, frame.data[:cut], frame.timestamp_ns)
        for _ in range(50):
            corrupt = bytearray(frame.data)
            for _ in range(rng.randint(1, 8)):
                corrupt[rng.randrange(len(corrupt))] = rng.randrange(256)
            packet = d.decode(frame.linktype, bytes(corrupt), frame.timestamp_ns)
            if packet is not None:
                assert packet.size <= 65535 and len(packet.payload) <= len(corrupt)
    assert d.stats.skipped["truncated"] > 0


def test_replayed_dns_tunnel_has_initiator_as_local_side() -> None:
    d = Decoder(DirectionResolver(infer=True))
    packets = [p for f in read_capture(PCAPS / "dns-tunnel-txt-base64.pcap")
               if (p := d.decode(f.linktype, f.data, f.timestamp_ns)) is not None]
    assert len(packets) == 164
    dns = [p for p in packets if p.remote_port == 53]
    assert {(p.local_port, p.remote_ip) for p in dns} == {(43246, ip_int("10.30.28.94"))}
    outbound = [p for p in dns if p.direction == OUTBOUND]
    assert (len(outbound), len(dns) - len(outbound)) == (81, 80)  # one query went unanswered
    # Outbound UDP keeps its header: the length field covers header plus DNS message.
    assert all(struct.unpack("!H", p.payload[4:6])[0] == len(p.payload) for p in outbound)
    assert all(p.size == 20 + len(p.payload) for p in outbound)
