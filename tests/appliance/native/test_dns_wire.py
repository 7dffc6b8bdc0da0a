"""The C DNS parser (appliance/native/dns_wire.h, reached through fastpath.dns_wire) against the Python one.

DNS flows are recorded by the C fast path, so its parser must say exactly what appliance/flows/dns.py says:
every case compares fastpath.dns_wire(payload, ts, tcp) with
record_codec._dns_pb(parse_dns(payload, ts)).SerializeToString() (parse_dns_tcp for TCP), byte for byte, or
both None. Each payload is tried as a UDP message and as a TCP segment with an honest, an overlong and no
length prefix. The hostile cases also state what the Python parser makes of them, so that each one is known
to reach the path it is named for.
"""

from __future__ import annotations

import random
import struct

import pytest

from appliance.flows import dns, record_codec
from appliance.generated import flow_record_pb2 as pb
from appliance.native import fastpath
from tests.appliance import wire
from tests.appliance.detection.pcap import FIXTURES, read_pcap

TS = 1_700_000_000_123_456_789
Q = struct.pack("!HH", 1, 1)  # QTYPE A, QCLASS IN
TO_QNAME = b"\xc0\x0c"  # a compression pointer to the question name


def header(qd: int = 1, an: int = 0, flags: int = 0x8180, ident: int = 0x1234) -> bytes:
    return struct.pack("!HHHHHH", ident, flags, qd, an, 0, 0)


def rr(name: bytes, rtype: int, rdata: bytes, ttl: int = 300, rdlen: int | None = None) -> bytes:
    return name + struct.pack("!HHIH", rtype, 1, ttl, len(rdata) if rdlen is None else rdlen) + rdata


def labels(*sizes: int, fill: bytes = b"a") -> bytes:
    return b"".join(bytes([n]) + fill * n for n in sizes) + b"\x00"


def python_wire(payload: bytes, ts: int, tcp: bool) -> bytes | None:
    msg = (dns.parse_dns_tcp if tcp else dns.parse_dns)(payload, ts)
    return None if msg is None else record_codec._dns_pb(msg).SerializeToString()


def _show(encoded: bytes | None) -> str:
    return "None" if encoded is None else str(pb.DnsMessage.FromString(encoded)).replace("\n", " | ")


def assert_same(payload: bytes, ts: int = TS) -> None:
    """The two parsers agree on `payload` as a UDP message and as TCP segments built from it."""
    cases = [(payload, False), (len(payload).to_bytes(2, "big") + payload, True),
             ((len(payload) + 1).to_bytes(2, "big") + payload, True), (payload, True)]
    for data, tcp in cases:
        got, want = fastpath.dns_wire(data, ts, tcp), python_wire(data, ts, tcp)
        assert got == want, f"tcp={tcp} payload={data.hex()}\n C: {_show(got)}\n py: {_show(want)}"


def _pcap_dns(name: str) -> list[bytes]:
    """The UDP port-53 payloads of a real capture (tests/fixtures/pcaps)."""
    out = []
    for _ms, frame in read_pcap(FIXTURES / name):
        ip = frame[14:]
        if frame[12:14] != b"\x08\x00" or ip[9] != 17:
            continue
        l4 = ip[(ip[0] & 0x0F) * 4 : struct.unpack("!H", ip[2:4])[0]]
        if 53 in struct.unpack("!HH", l4[:4]):
            out.append(l4[8:])
    return out


REAL = {name: _pcap_dns(name) for name in
        ("dns-benign-a-aaaa-mx.pcap", "dns-sofacy-c2-lookups.pcap", "dns-tunnel-txt-base64.pcap")}
REAL_RESPONSES = [m for msgs in REAL.values() for m in msgs if dns.parse_dns(m).is_response]


def _typical_responses() -> list[bytes]:
    """One real response per answer type the captures hold (A, AAAA, MX, TXT) and one without answers."""
    picked: dict[tuple[int, ...], bytes] = {}
    for m in REAL_RESPONSES:
        picked.setdefault(tuple(sorted({a.rtype for a in dns.parse_dns(m).answers})), m)
    return list(picked.values())


# The messages of tests/appliance/flows/test_dns.py and of the tracker scenarios (tests/appliance/wire.py).
FIXTURES_FROM_TESTS = {
    "query_mx_mixed_case": wire.dns_query("Mail.Example.COM", qtype=15, ident=77),
    "two_a_answers": wire.dns_response("www.example.org", [(1, bytes([93, 184, 216, 34])), (1, bytes([93, 184, 216, 35]))], ttl=60),
    "cname_into_question": wire.dns_response("www.example.org", [(5, b"\x03cdn\xc0\x10")]),
    "nxdomain": wire.dns_response("nope.example", [], rcode=3),
    "txt_and_aaaa": wire.dns_response("t.example", [(16, b"\x05hello\x05world"), (28, bytes(15) + b"\x01")]),
    "pointer_loop": header(flags=0x0100, ident=1) + b"\xc0\x0c" + Q,
    "truncated_response": wire.dns_response("www.example.org", [(1, bytes(4))])[:-2],
    "tcp_query": wire.dns_query("a.example"),
    "200_compressed_questions": header(qd=201, flags=0x0100, ident=7) + labels(*[1] * 120) + Q + (TO_QNAME + Q) * 200,
    "30_cnames_to_a_long_name": header(an=30, ident=7) + labels(*[1] * 120) + Q + rr(TO_QNAME, 5, TO_QNAME) * 30,
    "scenario_a": wire.dns_response("example.com", [(1, bytes([1, 2, 3, 4]))], ident=0, ttl=0),
    "scenario_a_aaaa": wire.dns_response("x.example", [(1, bytes([9, 9, 9, 9])), (28, bytes(range(16)))], qtype=28),
    "scenario_cname_txt": wire.dns_response("y.example", [(5, wire.dns_name("cdn.example.net")), (16, b"\x05hello")], rcode=3),
}


@pytest.mark.parametrize("payload", FIXTURES_FROM_TESTS.values(), ids=FIXTURES_FROM_TESTS.keys())
def test_the_dns_test_fixtures_encode_as_the_python_parser_does(payload):
    assert_same(payload)
    assert_same(payload, ts=0)


@pytest.mark.parametrize("capture", REAL.keys())
def test_every_message_of_the_real_captures_encodes_as_the_python_parser_does(capture):
    assert REAL[capture]
    for payload in REAL[capture]:
        assert_same(payload)


def test_a_typical_answer_is_parsed_in_full_by_both():
    # The differential tests mean something only if the messages are read, not both refused alike.
    encoded = fastpath.dns_wire(FIXTURES_FROM_TESTS["txt_and_aaaa"], TS)
    msg = pb.DnsMessage.FromString(encoded)
    assert (msg.id, msg.is_response, msg.qname, msg.qtype, msg.qclass, msg.malformed, msg.timestamp_ns) == (
        0x1234, True, "t.example", 1, 1, False, TS)
    assert [(a.name, a.rtype, a.ttl, a.data) for a in msg.answers] == [
        ("t.example", 16, 300, "helloworld"), ("t.example", 28, 300, "::1")]


# name -> (payload, what parse_dns gives for it: malformed, number of answers, qname)
HOSTILE = {
    "pointer_to_itself": (header() + b"\xc0\x0c" + Q, True, 0, ""),
    "two_pointers_to_each_other": (header() + b"\xc0\x0e\xc0\x0c" + Q, True, 0, ""),
    "32_pointer_hops_are_followed": (header() + b"".join(struct.pack("!H", 0xC000 | (14 + 2 * i)) for i in range(32))
                                     + labels(3, fill=b"x") + Q, False, 0, "xxx"),
    "33_pointer_hops_are_a_loop": (header() + b"".join(struct.pack("!H", 0xC000 | (14 + 2 * i)) for i in range(33))
                                   + labels(3, fill=b"x") + Q, True, 0, ""),
    "pointer_past_the_end": (header() + b"\xc0\xff" + Q, True, 0, ""),
    "pointer_to_the_last_byte": (header() + b"\x01a\xc0\x10", True, 0, ""),
    "pointer_cut_after_its_first_byte": (header() + b"\x01a\xc0", True, 0, ""),
    # All 14 offset bits count: the question points 0x2345 bytes in, past an answer of 9,000 zero bytes.
    "pointer_to_a_far_offset": (header(an=1) + b"\xe3\x45" + Q + rr(b"\x00", 99, bytes(0x2345 - 29)) + wire.dns_name("Far.example"),
                                False, 1, "far.example"),
    "pointer_with_high_offset_bits": (header() + b"\xff\xff" + Q, True, 0, ""),
    "reserved_label_type_0x40": (header() + b"\x41a\x00" + Q, True, 0, ""),
    "reserved_label_type_0x80": (header() + b"\x81a\x00" + Q, True, 0, ""),
    "reserved_label_in_a_skipped_question": (header(qd=2) + wire.dns_name("a.example") + Q + b"\x80" + Q, True, 0, "a.example"),
    "reserved_label_in_an_answer_name": (header(an=1) + wire.dns_name("a.example") + Q + rr(b"\x40\x00", 1, bytes(4)),
                                         True, 0, "a.example"),
    "label_cut_by_the_end": (header() + b"\x05ab", True, 0, ""),
    "name_of_255_octets": (header() + labels(63, 63, 63, 62) + Q, False, 0, ".".join(["a" * 63] * 3 + ["a" * 62])),
    "name_of_256_octets": (header() + labels(63, 63, 63, 63) + Q, True, 0, ""),
    "name_of_256_octets_across_a_pointer": (header(an=1) + labels(63, 63, 63) + Q
                                            + rr(bytes([63]) + b"b" * 63 + TO_QNAME, 1, bytes(4)), True, 0, "a" * 63 + "." + "a" * 63 + "." + "a" * 63),
    "non_ascii_and_uppercase_labels": (header(an=1) + b"\x06Ab\x80\xffC\\\x03\xc3\xa9.\x00" + Q
                                       + rr(TO_QNAME, 1, bytes([10, 0, 0, 1])), False, 1, "ab\\x80\\xffc\\.\\xc3\\xa9."),
    "control_and_nul_bytes_in_a_label": (header() + b"\x04\x00\x01\x7f\x1f\x00" + Q, False, 0, "\x00\x01\x7f\x1f"),
    "root_question_and_answer": (header(an=1) + b"\x00" + Q + rr(b"\x00", 0, b"", ttl=0), False, 1, ""),
    "header_only_all_zero": (header(qd=0, flags=0, ident=0), False, 0, ""),
    "every_flag_and_rcode": (header(qd=0, flags=0xFFFF, ident=0xFFFF), False, 0, ""),
    "question_cut_in_its_type": (header() + wire.dns_name("a.example") + b"\x00\x01\x00", True, 0, "a.example"),
    "qdcount_2_second_compressed": (header(qd=2, an=1) + wire.dns_name("a.example") + Q + TO_QNAME + Q
                                    + rr(TO_QNAME, 1, bytes([1, 2, 3, 4])), False, 1, "a.example"),
    "qdcount_65535_on_a_small_message": (header(qd=65535) + wire.dns_name("a.example") + Q + TO_QNAME * 50, True, 0, "a.example"),
    "ancount_33_keeps_32": (header(an=33) + wire.dns_name("a.example") + Q
                            + b"".join(rr(TO_QNAME, 1, bytes([10, 0, 0, i])) for i in range(33)), False, 32, "a.example"),
    "ancount_40_keeps_32": (header(an=40) + wire.dns_name("a.example") + Q
                            + b"".join(rr(TO_QNAME, 1, bytes([10, 0, 0, i])) for i in range(40)), False, 32, "a.example"),
    "ancount_65535_on_a_small_message": (header(an=65535) + wire.dns_name("a.example") + Q
                                         + rr(TO_QNAME, 1, bytes(4)) * 3, True, 3, "a.example"),
    "300_compressed_questions": (header(qd=301) + labels(*[1] * 120) + Q + (TO_QNAME + Q) * 300, False, 0, ".".join("a" * 120)),
    "300_compressed_answer_names_exhaust_the_label_budget": (
        header(an=300) + labels(*[1] * 120) + Q + rr(TO_QNAME, 5, TO_QNAME) * 300, True, 1, ".".join("a" * 120)),
    # 127 labels in the question, 128 (a pointer and the 127) per compressed name: 511, then 1 or 2 more.
    "512_labels_are_read": (header(an=3) + labels(*[1] * 127) + Q + rr(TO_QNAME, 5, TO_QNAME) + rr(TO_QNAME, 16, b"\x01t")
                            + rr(b"\x01b\x00", 1, bytes(4)), False, 3, ".".join("a" * 127)),
    "the_513th_label_is_refused": (header(an=3) + labels(*[1] * 127) + Q + rr(TO_QNAME, 5, TO_QNAME) + rr(TO_QNAME, 16, b"\x01t")
                                   + rr(b"\x01b\x01c\x00", 1, bytes(4)), True, 2, ".".join("a" * 127)),
    "a_with_3_and_5_bytes_is_hex": (header(an=2) + b"\x00" + Q + rr(b"\x00", 1, b"\x01\x02\x03") + rr(b"\x00", 1, b"\xaa\xbb\xcc\xdd\xee"),
                                    False, 2, ""),
    "aaaa_with_4_bytes_is_hex": (header(an=1) + b"\x00" + Q + rr(b"\x00", 28, b"\x01\x02\x03\x04"), False, 1, ""),
    "unknown_type_is_hex": (header(an=2) + b"\x00" + Q + rr(b"\x00", 99, bytes(range(250, 256)) + b"\x00\x0f") + rr(b"\x00", 65535, b""),
                            False, 2, ""),
    "txt_running_past_its_rdata": (header(an=2) + b"\x00" + Q + rr(b"\x00", 16, b"\x10abc") + rr(b"\x00", 16, b"\x02Hi\x00\x05XY\xe9"),
                                   False, 2, ""),
    "txt_with_non_ascii_and_uppercase_kept": (header(an=1) + b"\x00" + Q + rr(b"\x00", 16, b"\x06AB\x80\\\xff\x00\x00"), False, 1, ""),
    "txt_empty": (header(an=1) + b"\x00" + Q + rr(b"\x00", 16, b""), False, 1, ""),
    "mx_with_rdlen_0_1_2_is_hex": (header(an=3) + b"\x00" + Q + rr(b"\x00", 15, b"") + rr(b"\x00", 15, b"\x00")
                                   + rr(b"\x00", 15, b"\x00\x0a"), False, 3, ""),
    "mx_with_rdlen_3_reads_the_name_beyond": (header(an=1) + wire.dns_name("a.example") + Q + rr(TO_QNAME, 15, b"\x00\x0a\x04", rdlen=3)
                                              + b"MAIL\x00", False, 1, "a.example"),
    "mx_pointing_outside": (header(an=1) + b"\x00" + Q + rr(b"\x00", 15, b"\x00\x0a\xc3\xff"), True, 0, ""),
    "mx_into_the_question": (header(an=1) + wire.dns_name("Example.ORG") + Q + rr(TO_QNAME, 15, b"\x00\x05\x02MX\xc0\x0c"), False, 1, "example.org"),
    "cname_pointing_outside": (header(an=1) + b"\x00" + Q + rr(b"\x00", 5, b"\xc3\xff"), True, 0, ""),
    "cname_with_rdlen_0_reads_the_next_record": (header(an=2) + wire.dns_name("a.example") + Q + rr(TO_QNAME, 5, b"")
                                                 + rr(b"\x03nxt\x00", 1, bytes(4)), False, 2, "a.example"),
    "ns_and_ptr_names": (header(an=2) + wire.dns_name("a.example") + Q + rr(TO_QNAME, 2, b"\x02NS\xc0\x0c")
                         + rr(TO_QNAME, 12, b"\x03PTR\x00"), False, 2, "a.example"),
    "rdata_past_the_end": (header(an=1) + b"\x00" + Q + rr(b"\x00", 1, b"\x01\x02", rdlen=4), True, 0, ""),
    "resource_record_cut_in_its_fixed_part": (header(an=1) + b"\x00" + Q + b"\x00\x00\x01\x00\x01\x00", True, 0, ""),
    "ttl_of_all_ones": (header(an=1) + b"\x00" + Q + rr(b"\x00", 1, bytes(4), ttl=0xFFFFFFFF), False, 1, ""),
}


@pytest.mark.parametrize("name", HOSTILE.keys())
def test_hostile_messages_encode_as_the_python_parser_does(name):
    payload, malformed, answers, qname = HOSTILE[name]
    msg = dns.parse_dns(payload, TS)
    assert (msg.malformed, len(msg.answers), msg.qname) == (malformed, answers, qname), "the case does not reach its path"
    assert_same(payload)
    assert_same(payload, ts=0)


@pytest.mark.parametrize("address", [
    "::", "::1", "1::", "1:0:0:1::", "fe80::1:2", "2001:db8::8:800:200c:417a", "2001:db8:0:0:1:0:0:1",
    "1:2:3:4:5:6:7:8", "::ffff:192.0.2.1", "::192.0.2.1", "::ffff:0:1", "64:ff9b::c000:201", "0:1::"])
def test_aaaa_text_is_the_python_text(address):
    import socket
    raw = socket.inet_pton(socket.AF_INET6, address)
    payload = header(an=1) + b"\x00" + Q + rr(b"\x00", 28, raw)
    assert_same(payload)


def test_a_text_is_the_python_text_for_every_octet_value():
    for value in range(256):
        octets = [value, (value * 7) % 256, 255 - value, (value + 128) % 256]
        assert_same(header(an=2) + b"\x00" + Q + rr(b"\x00", 1, bytes(octets)) + rr(b"\x00", 1, bytes(octets[::-1])))


def test_a_framed_message_is_the_field_of_the_record_that_holds_it():
    # What C will write into FlowRecord.dns (field 20) and AgentDns.message (field 2); the 9 kB message
    # needs a two-byte length, the all-zero header an empty one.
    payloads = list(FIXTURES_FROM_TESTS.values()) + REAL_RESPONSES[:10] + [
        HOSTILE["pointer_to_a_far_offset"][0], HOSTILE["header_only_all_zero"][0]]
    for payload in payloads:
        for ts in (0, TS):
            message = pb.DnsMessage.FromString(python_wire(payload, ts, False))
            assert fastpath.dns_wire(payload, ts, field=20) == pb.FlowRecord(dns=[message]).SerializeToString()
            assert fastpath.dns_wire(payload, ts, field=2) == pb.AgentDns(message=message).SerializeToString()
    assert fastpath.dns_wire(bytes(5), TS, field=20) is None
    with pytest.raises(ValueError):
        fastpath.dns_wire(payloads[0], TS, field=2**29)


def test_shorter_than_a_header_is_none_for_both():
    for n in range(16):
        blob = bytes(range(n))
        assert fastpath.dns_wire(blob, TS) == python_wire(blob, TS, False)
        assert fastpath.dns_wire(blob, TS, tcp=True) == python_wire(blob, TS, True)
    assert fastpath.dns_wire(bytes(11), TS) is None and fastpath.dns_wire(bytes(13), TS, tcp=True) is None
    assert fastpath.dns_wire(bytes(12), TS) is not None and fastpath.dns_wire(bytes(14), TS, tcp=True) is not None


def test_timestamp_takes_the_whole_uint64_range_and_refuses_what_is_outside():
    payload = FIXTURES_FROM_TESTS["tcp_query"]
    assert_same(payload, ts=2**64 - 1)
    for bad in (-1, 2**64):
        with pytest.raises(OverflowError):
            fastpath.dns_wire(payload, bad)


def test_every_truncation_of_real_responses_encodes_as_the_python_parser_does():
    typical = _typical_responses()
    assert len(typical) >= 4  # A, AAAA, MX, TXT and an answerless one from the captures
    for payload in typical + [FIXTURES_FROM_TESTS["txt_and_aaaa"], HOSTILE["mx_into_the_question"][0]]:
        for end in range(len(payload) + 1):
            assert_same(payload[:end])


def _mutate(rng: random.Random, payload: bytes) -> bytes:
    data = bytearray(payload)
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(7)
        at = rng.randrange(len(data) + 1)
        if op == 0 and data:
            data[min(at, len(data) - 1)] = rng.randrange(256)
        elif op == 1 and data:
            data[min(at, len(data) - 1)] ^= 1 << rng.randrange(8)
        elif op == 2:  # a compression pointer anywhere, to anywhere
            data[at:at + 2] = struct.pack("!H", 0xC000 | rng.randrange(len(payload) + 8))
        elif op == 3:
            del data[at:at + rng.randint(1, 8)]
        elif op == 4:
            data[at:at] = rng.randbytes(rng.randint(1, 8))
        elif op == 5 and len(data) >= 12:  # QDCOUNT or ANCOUNT
            count = 4 + 2 * rng.randrange(2)
            data[count : count + 2] = struct.pack("!H", rng.choice([0, 1, 2, 33, 300, 65535]))
        elif op == 6:
            del data[at:]
    return bytes(data)


def test_seeded_random_mutations_of_real_responses_encode_as_the_python_parser_does():
    rng = random.Random(15)
    bases = REAL_RESPONSES + list(FIXTURES_FROM_TESTS.values()) + [p for p, *_ in HOSTILE.values()]
    malformed = answered = 0
    for _ in range(4000):
        payload = _mutate(rng, rng.choice(bases))
        assert_same(payload, ts=rng.choice([0, TS]))
        msg = dns.parse_dns(payload)
        malformed += msg is not None and msg.malformed
        answered += msg is not None and not msg.malformed and bool(msg.answers)
    # The mutations reach the error paths and whole messages with answers alike.
    assert malformed > 1000 and answered > 400, (malformed, answered)


def test_random_garbage_encodes_as_the_python_parser_does():
    rng = random.Random(7)
    for _ in range(2000):
        assert_same(rng.randbytes(rng.randrange(0, 80)))


def test_the_responses_handed_to_the_resolver_cache_are_those_it_learns_from():
    """DnsWire.resolves (C) says what flows.dns.resolves says of the Python parse: the flow table hands over a
    response, as parsed, exactly when it names its question and answers it with an address (mutated real
    responses, hostile cases, answers of every type)."""
    from appliance.flows.tracker import FlowTracker
    from appliance.ingest.convert import PacketConverter

    rng = random.Random(16)
    bases = REAL_RESPONSES + list(FIXTURES_FROM_TESTS.values()) + [p for p, *_ in HOSTILE.values()]
    payloads = bases + [_mutate(rng, rng.choice(bases)) for _ in range(3000)]
    handed: list[bytes] = []
    tracker = FlowTracker(lambda flows: None, on_dns_responses=lambda answers: handed.extend(m for _, m in answers))
    converter = PacketConverter()
    for start in range(0, len(payloads), 500):
        tracker.add_packets("a", converter.read([
            wire.udp_in("10.0.0.5", "10.0.0.1", 1024 + i, 53, payload, ts_ms=wire.now_ms())
            for i, payload in enumerate(payloads[start:start + 500], start)]))
    wanted = []
    for payload in payloads:
        msg = dns.parse_dns(payload)
        if msg is not None and dns.resolves(msg):
            wanted.append(msg.qname)
    assert [record_codec.dns_message_of(m).qname for m in handed] == wanted
    assert len(wanted) > 100 and len(payloads) - len(wanted) > 1000  # both kinds, many of each
