"""fastpath.decode_dns_batch, the C reader of DNS batches, against upb (record_codec._decode_dns_python).

The analysis process reads every DNS answer the ingest side saw through it (a cluster analyzer reads them from
Redis): on any bytes the two readers both refuse or both return equal items. A message field repeated inside one
item is merged by upb; the C reader hands such a batch to upb rather than merging itself.
"""

from __future__ import annotations

import random

import pytest

from appliance.flows import record_codec
from appliance.model import DnsAnswer, DnsMessage
from appliance.native import fastpath
from tests.appliance.native.protowire import field_bytes as _delimited
from tests.appliance.native.protowire import mutated
from tests.appliance.native.protowire import tag as _tag
from tests.appliance.native.protowire import varint as _varint


def _outcome(decode, data: bytes):  # noqa: ANN001, ANN202
    try:
        return decode(data)
    except record_codec.RecordError:
        return "refused"


def assert_same(data: bytes):  # noqa: ANN201
    c, py = _outcome(record_codec.decode_dns, data), _outcome(record_codec._decode_dns_python, data)
    assert c == py, data.hex()
    return c


ANSWERED = DnsMessage(0x1234, True, 0, "www.example.com", 1, 1,
                      [DnsAnswer("www.example.com", 5, 300, "cdn.example.net"), DnsAnswer("cdn.example.net", 1, 60, "192.0.2.7")],
                      False, 1_700_000_000_000_000_000)
QUERY = DnsMessage(7, False, 0, "q.t.example.org", 16, 1, [], False, 5)
FAILED = DnsMessage(9, True, 3, "xk2j9q.example", 1, 1, [], True, 0)


@pytest.fixture(scope="module")
def small_batch() -> bytes:
    return record_codec.encode_dns([("agent-a", ANSWERED, False), ("agent-b", QUERY, True), ("", FAILED, False)])


def test_real_items_decode_to_what_was_encoded(small_batch) -> None:
    items = [("agent-a", ANSWERED, False), ("agent-b", QUERY, True), ("", FAILED, False)]
    assert assert_same(small_batch) == items
    assert assert_same(b"") == []


def test_every_truncation(small_batch) -> None:
    refused = sum(assert_same(small_batch[:end]) == "refused" for end in range(len(small_batch) + 1))
    assert refused > len(small_batch) // 2


def test_seeded_random_mutations(small_batch) -> None:
    rng = random.Random(20261124)
    outcomes = {"refused": 0, "read": 0}
    for _ in range(3000):
        outcomes["refused" if assert_same(mutated(small_batch, rng)) == "refused" else "read"] += 1
    assert outcomes["refused"] > 100 and outcomes["read"] > 100


def _item(*fields: bytes) -> bytes:
    return _delimited(1, b"".join(fields))


QUERY_PB = record_codec._dns_pb(QUERY).SerializeToString()
ANSWERED_PB = record_codec._dns_pb(ANSWERED).SerializeToString()


@pytest.mark.parametrize("data", [
    _item(),  # an empty item: empty agent, a message of defaults, False
    _item(_delimited(1, b"agent")),  # no message field
    _item(_delimited(2, QUERY_PB), _delimited(1, b"a1"), _delimited(1, b"a2")),  # the last agent id wins
    _item(_tag(3, 0) + _varint(2)),  # a bool written as 2
    _item(_tag(9, 0) + _varint(1), _delimited(2, QUERY_PB)),  # unknown fields are skipped
    _item(_delimited(1, b"\xff\xfe")),  # an agent id that is not UTF-8: refused
    _item(_delimited(2, QUERY_PB + _delimited(4, b"\xc3"))),  # a qname that is not UTF-8: refused
    _item(_tag(2, 0) + _varint(5)),  # the message field with another wire type
    _tag(1, 0) + _varint(1),  # an item that is a varint
    _item(_delimited(2, _delimited(7, b"\xff"))),  # an answer that is not a message
])
def test_odd_items_read_as_upb_reads_them(data) -> None:
    assert_same(data)


def test_a_repeated_message_field_is_merged_by_upb() -> None:
    """upb merges a message field that comes twice (scalars: the last wins; answers: joined): the C reader says so
    (None) and decode_dns reads that batch with upb."""
    data = _item(_delimited(1, b"agent"), _delimited(2, ANSWERED_PB), _delimited(2, QUERY_PB))
    assert fastpath.decode_dns_batch(data, DnsMessage, DnsAnswer) is None
    [(agent, merged, from_event)] = assert_same(data)
    assert (agent, from_event, merged.qname, merged.qtype) == ("agent", False, QUERY.qname, QUERY.qtype)
    assert merged.answers == ANSWERED.answers  # kept from the first: the second had none to add


def test_the_c_reader_checks_its_arguments() -> None:
    with pytest.raises(TypeError):
        fastpath.decode_dns_batch(b"")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        fastpath.decode_dns_batch("text", DnsMessage, DnsAnswer)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        fastpath.decode_dns_batch(b"\x0a\xff\xff\xff\xff\x0f", DnsMessage, DnsAnswer)
    assert fastpath.decode_dns_batch(memoryview(b""), DnsMessage, DnsAnswer) == []


def test_no_leak_on_read_refused_or_merged_batches(small_batch) -> None:
    import tracemalloc

    merged = _item(_delimited(2, ANSWERED_PB), _delimited(2, QUERY_PB))
    refused = small_batch[:-3]

    def once() -> None:
        fastpath.decode_dns_batch(small_batch, DnsMessage, DnsAnswer)
        assert fastpath.decode_dns_batch(merged, DnsMessage, DnsAnswer) is None
        try:  # not pytest.raises: its exception info outlives the call and would be counted here
            fastpath.decode_dns_batch(refused, DnsMessage, DnsAnswer)
        except ValueError:
            pass
        else:
            raise AssertionError("a cut batch was read")

    for _ in range(200):
        once()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(5000):
            once()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 16_384, grown
