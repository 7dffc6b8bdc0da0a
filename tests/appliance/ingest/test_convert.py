import time

import pytest

from appliance.generated import sensor_pb2
from appliance.ingest.convert import ConvertLimits, PacketConverter
from appliance.model import Transport, ip_int, ip_str
from tests.appliance import wire

NOW_NS = 1_800_000_000_000 * 1_000_000


@pytest.fixture
def conv():
    return PacketConverter()


def test_ips_are_u32_values_of_the_address(conv):
    pkt = conv.convert(wire.packet(local="10.0.0.1", remote="192.168.1.20"), NOW_NS)
    assert pkt.local_ip == 167772161
    assert ip_str(pkt.local_ip) == "10.0.0.1" and pkt.remote_addr == "192.168.1.20"
    assert ip_int("10.0.0.1") == 167772161


def test_timestamp_ms_becomes_ns(conv):
    pkt = conv.convert(wire.packet(ts_ms=1_700_000_000_123), NOW_NS)
    assert pkt.timestamp_ns == 1_700_000_000_123_000_000


@pytest.mark.parametrize("number,transport", [(6, Transport.TCP), (17, Transport.UDP), (1, Transport.ICMP), (47, Transport.OTHER)])
def test_protocol_number_maps_to_transport(conv, number, transport):
    pkt = conv.convert(wire.packet(protocol=number), NOW_NS)
    assert pkt.transport is transport and pkt.protocol == number


def test_unknown_protocol_has_no_ports(conv):
    pkt = conv.convert(wire.packet(protocol=47, lport=5, rport=6), NOW_NS)
    assert (pkt.local_port, pkt.remote_port) == (0, 0)


def test_outbound_udp_header_is_stripped(conv):
    pb = wire.udp_out("10.0.0.5", "8.8.8.8", 5353, 9999, b"hello")
    assert pb.payload[:8] != b"hello"
    pkt = conv.convert(pb, NOW_NS)
    assert pkt.payload == b"hello"


def test_inbound_udp_payload_is_kept_whole(conv):
    pkt = conv.convert(wire.udp_in("10.0.0.5", "8.8.8.8", 5353, 9999, b"hello"), NOW_NS)
    assert pkt.payload == b"hello"


def test_outbound_udp_shorter_than_its_header_is_repaired_and_counted(conv):
    pkt = conv.convert(wire.packet(protocol=17, payload=b"\x01\x02"), NOW_NS)
    assert pkt.payload == b"" and conv.repaired["short_header"] == 1


def test_dns_query_and_compressed_response_are_parsed(conv):
    query = conv.convert(wire.udp_out("10.0.0.5", "10.0.0.1", 40000, 53, wire.dns_query("www.example.org")), NOW_NS)
    assert query.dns.qname == "www.example.org" and not query.dns.is_response
    answer = wire.dns_response("www.example.org", [(1, bytes([1, 2, 3, 4]))])
    reply = conv.convert(wire.udp_in("10.0.0.5", "10.0.0.1", 40000, 53, answer), NOW_NS)
    assert reply.dns.is_response and reply.dns.answers[0].name == "www.example.org"
    assert reply.dns.answers[0].data == "1.2.3.4"


def test_malformed_dns_is_flagged_and_packet_kept(conv):
    bad = wire.dns_query("x.example")[:-3]
    pkt = conv.convert(wire.udp_out("10.0.0.5", "10.0.0.1", 40000, 53, bad), NOW_NS)
    assert pkt is not None and pkt.dns.malformed


def test_icmp_type_code_and_data(conv):
    echo = bytes([8, 0, 0xAB, 0xCD, 0, 1, 0, 7]) + b"abcdefgh"
    pkt = conv.convert(wire.packet(protocol=1, payload=echo, lport=0, rport=0), NOW_NS)
    assert (pkt.icmp.type, pkt.icmp.code) == (8, 0)
    assert pkt.icmp.data == bytes([0, 1, 0, 7]) + b"abcdefgh"


def test_truncated_icmp_is_kept_without_icmp_fields(conv):
    pkt = conv.convert(wire.packet(protocol=1, payload=b"\x08\x00"), NOW_NS)
    assert pkt.icmp is None and conv.repaired["short_header"] == 1


@pytest.mark.parametrize("kwargs,reason", [
    ({"local": "0.0.0.0"}, "zero_address"),
    ({"remote": "0.0.0.0"}, "zero_address"),
    ({"direction": 0}, "bad_direction"),
    ({"direction": 9}, "bad_direction"),
    ({"rport": 70000}, "bad_port"),
    ({"protocol": 300}, "bad_protocol"),
])
def test_unusable_packets_are_rejected_with_a_reason(conv, kwargs, reason):
    assert conv.convert(wire.packet(**kwargs), NOW_NS) is None
    assert conv.rejected == {reason: 1}


@pytest.mark.parametrize("ts_ms", [0, NOW_NS // 1_000_000 + 86_400_000])
def test_missing_or_future_timestamps_are_replaced_by_receive_time(conv, ts_ms):
    pkt = conv.convert(wire.packet(ts_ms=ts_ms), NOW_NS)
    assert pkt.timestamp_ns == NOW_NS and conv.repaired["timestamp_replaced"] == 1


def test_oversized_payload_is_truncated_and_counted():
    conv = PacketConverter(ConvertLimits(max_payload_bytes=100))
    pkt = conv.convert(wire.packet(payload=b"x" * 5000), NOW_NS)
    assert len(pkt.payload) == 100 and conv.repaired["payload_truncated"] == 1


def test_empty_message_is_rejected_not_fatal(conv):
    assert conv.convert(sensor_pb2.NetworkPacket(), time.time_ns()) is None
