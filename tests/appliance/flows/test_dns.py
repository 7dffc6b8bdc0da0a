import struct

from appliance.flows.dns import parse_dns, parse_dns_tcp
from tests.appliance import wire


def test_query_metadata_is_parsed():
    msg = parse_dns(wire.dns_query("Mail.Example.COM", qtype=15, ident=77))
    assert msg is not None and not msg.malformed
    assert (msg.id, msg.is_response, msg.qname, msg.qtype, msg.qclass) == (77, False, "mail.example.com", 15, 1)


def test_response_with_compressed_names_yields_answers():
    payload = wire.dns_response("www.example.org", [(1, bytes([93, 184, 216, 34])), (1, bytes([93, 184, 216, 35]))], ttl=60)
    msg = parse_dns(payload)
    assert msg.is_response and msg.rcode == 0 and not msg.malformed
    assert [(a.name, a.rtype, a.ttl, a.data) for a in msg.answers] == [
        ("www.example.org", 1, 60, "93.184.216.34"),
        ("www.example.org", 1, 60, "93.184.216.35"),
    ]


def test_cname_target_pointing_into_the_question_is_resolved():
    # CNAME rdata "cdn" + pointer to "example.org" inside the question name (offset 12 + 4).
    rdata = b"\x03cdn\xc0\x10"
    msg = parse_dns(wire.dns_response("www.example.org", [(5, rdata)]))
    assert msg.answers[0].data == "cdn.example.org"


def test_nxdomain_rcode():
    msg = parse_dns(wire.dns_response("nope.example", [], rcode=3))
    assert msg.rcode == 3 and msg.answers == []


def test_txt_and_aaaa_answers():
    txt = b"\x05hello\x05world"
    aaaa = bytes(15) + b"\x01"
    msg = parse_dns(wire.dns_response("t.example", [(16, txt), (28, aaaa)]))
    assert msg.answers[0].data == "helloworld"
    assert msg.answers[1].data == "::1"


def test_pointer_loop_is_flagged_not_fatal():
    head = struct.pack("!HHHHHH", 1, 0x0100, 1, 0, 0, 0)
    msg = parse_dns(head + b"\xc0\x0c" + b"\x00\x01\x00\x01")
    assert msg is not None and msg.malformed


def test_truncated_message_keeps_what_was_read():
    full = wire.dns_response("www.example.org", [(1, bytes(4))])
    msg = parse_dns(full[:-2])
    assert msg.malformed and msg.qname == "www.example.org" and msg.answers == []


def test_too_short_for_a_header_is_none():
    assert parse_dns(b"\x00\x01\x02") is None


def test_tcp_length_prefix_is_removed():
    query = wire.dns_query("a.example")
    msg = parse_dns_tcp(len(query).to_bytes(2, "big") + query)
    assert msg.qname == "a.example" and not msg.malformed


def test_garbage_never_raises():
    import random
    rng = random.Random(7)
    for _ in range(2000):
        blob = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 80)))
        parse_dns(blob)
        parse_dns_tcp(blob)



def test_a_crafted_message_of_many_compressed_questions_follows_one_name(monkeypatch):
    from appliance.flows import dns as dns_module
    # A name of 120 labels, then 200 questions pointing at it: a parser that follows every pointer
    # reads 24,000 labels; ours reads the first question's name and skips the rest unread.
    long_name = b"".join(b"\x01a" for _ in range(120)) + b"\x00"
    head = struct.pack("!HHHHHH", 7, 0x0100, 201, 0, 0, 0)
    body = long_name + b"\x00\x01\x00\x01" + b"\xc0\x0c\x00\x01\x00\x01" * 200
    reads = []
    real = dns_module._read_name
    monkeypatch.setattr(dns_module, "_read_name", lambda *a: reads.append(a[1]) or real(*a))
    msg = parse_dns(head + body)
    assert msg.qname.count(".") == 119 and not msg.malformed
    assert reads == [12]


def test_label_budget_stops_answer_amplification():
    long_name = b"".join(b"\x01a" for _ in range(120)) + b"\x00"
    head = struct.pack("!HHHHHH", 7, 0x8180, 1, 30, 0, 0)
    answers = (b"\xc0\x0c" + struct.pack("!HHIH", 5, 1, 60, 2) + b"\xc0\x0c") * 30  # CNAMEs to the long name
    msg = parse_dns(head + long_name + b"\x00\x01\x00\x01" + answers)
    assert msg.malformed and len(msg.answers) < 30
