"""fastpath.decode_records, the C reader of flow record batches, against upb (record_codec._decode_python).

The analysis process and the cluster's analyzers read every finished flow through it, and a cluster
analyzer reads what comes over Redis: on any bytes the two decoders either both refuse or both return
equal records. Where the wire is odd, the C reader does what upb does, and a test below pins each choice.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from appliance.flows import record_codec
from appliance.flows.tracker import FlowTracker
from appliance.ingest.convert import PacketConverter
from appliance.model import FlowRecord, Transport
from appliance.native.fastpath import WireFlow
from tests.appliance.detection import scenarios as sc
from tests.appliance.native.protowire import mutated


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        if not n:
            out.append(low)
            return bytes(out)
        out.append(low | 0x80)


def _tag(field: int, wire_type: int) -> bytes:
    return _varint(field << 3 | wire_type)


def _delimited(field: int, body: bytes) -> bytes:
    return _tag(field, 2) + _varint(len(body)) + body


VERSION_1 = _tag(1, 0) + _varint(1)


def _batch(*records: bytes) -> bytes:
    return VERSION_1 + b"".join(_delimited(2, r) for r in records)


def _outcome(decode: Callable[[bytes], list[FlowRecord]], data: bytes) -> list[FlowRecord] | str:
    try:
        return decode(data)
    except record_codec.RecordError:
        return "refused"


def _python(data: bytes) -> list[FlowRecord] | str:
    try:
        return record_codec._decode_python(data)
    except record_codec.RecordError:
        return "refused"


def assert_same(data: bytes) -> list[FlowRecord] | str:
    """Both decoders refuse `data`, or both return equal records, samples linked to their record's own DNS message."""
    c, py = _outcome(record_codec.decode, data), _python(data)
    assert c == py, data.hex()
    if isinstance(c, list):
        for record in c:
            for sample in record.samples:
                assert sample.dns is None or any(sample.dns is m for m in record.dns)
    return c


def _tracked(ended_as_wire: bool) -> list[record_codec.EndedFlow]:
    ended: list[record_codec.EndedFlow] = []
    tracker = FlowTracker(ended.extend, ended_as_wire=ended_as_wire)
    converter = PacketConverter()
    for stream in (sc.benign_office(1, minutes=2), sc.iodine_tunnel(seconds=10), sc.icmp_tunnel(), sc.raw_ip_tls(),
                   sc.http_exfiltration()):
        for batch in sc.batches(stream.sorted()):
            tracker.add_packets(stream.machine_id, converter.read(batch.packets))
    tracker.flush_all()
    return ended


@pytest.fixture(scope="module")
def corpus() -> dict[str, list[record_codec.EndedFlow]]:
    return {"records": _tracked(False), "wire": _tracked(True)}


@pytest.fixture(scope="module")
def small_batch(corpus) -> bytes:
    """A few real flows of each kind (TCP with samples, DNS with answers, ICMP): the seed of the hostile bytes."""
    records = [f for f in corpus["records"] if isinstance(f, FlowRecord)]
    pick = [next(f for f in records if f.protocol == 6 and f.samples),
            next(f for f in records if f.dns and any(m.answers for m in f.dns) and f.samples),
            next(f for f in records if f.protocol == 1 and f.samples)]
    for f in pick:
        f.samples = f.samples[:2]
    return record_codec.encode(pick)


@pytest.mark.parametrize("kind", ["records", "wire"])
def test_the_corpus_decodes_to_the_records_upb_makes(corpus, kind) -> None:
    flows = corpus[kind]
    assert any(type(f) is WireFlow for f in flows) == (kind == "wire")
    back = assert_same(record_codec.encode(flows))
    assert isinstance(back, list) and len(back) == len(flows)
    assert {r.transport for r in back} == {Transport.TCP, Transport.UDP, Transport.ICMP}
    assert any(s.dns is not None for r in back for s in r.samples)
    assert any(s.icmp is not None for r in back for s in r.samples)


def test_every_truncation_of_a_real_batch(small_batch) -> None:
    refused = 0
    for end in range(len(small_batch) + 1):
        refused += assert_same(small_batch[:end]) == "refused"
    assert refused > len(small_batch) // 2  # most cuts fall inside a record's length


def test_seeded_random_mutations(small_batch) -> None:
    rng = random.Random(20261123)
    outcomes = {"refused": 0, "read": 0}
    for _ in range(3000):
        outcomes["refused" if assert_same(mutated(small_batch, rng)) == "refused" else "read"] += 1
    assert outcomes["refused"] > 100 and outcomes["read"] > 100  # both paths were exercised


@pytest.mark.parametrize("data", [b"", _tag(1, 0) + _varint(2), _tag(1, 0) + _varint(0), _tag(1, 0) + _varint(1 << 32 | 2),
                                  VERSION_1 + _tag(1, 0) + _varint(7), _batch(b"") + _tag(1, 0) + _varint(3)])
def test_versions_other_than_1_are_refused_the_last_one_counting(data) -> None:
    assert assert_same(data) == "refused"
    assert isinstance(assert_same(data + VERSION_1), list)  # a version 1 after them counts: the last value wins


def test_a_uint32_field_keeps_the_low_32_bits_of_a_longer_varint_as_upb_does() -> None:
    """The choice for out-of-range integers: upb truncates a uint32 field's varint to its low 32 bits (it does not
    refuse it), so the C reader does too; the version field follows the same rule (2**32 + 1 reads as 1)."""
    record = _tag(3, 0) + _varint(1 << 40 | 17) + _tag(4, 0) + _varint(0xFFFFFFFFFFFFFFFF)
    back = assert_same(_tag(1, 0) + _varint(1 << 32 | 1) + _delimited(2, record))
    assert isinstance(back, list) and back[0].protocol == 17 and back[0].transport is Transport.UDP
    assert back[0].local_ip == 0xFFFFFFFF
    assert assert_same(_batch(_tag(8, 0) + _varint(0xFFFFFFFFFFFFFFFF)))[0].first_ns == 0xFFFFFFFFFFFFFFFF


def test_the_last_value_of_a_scalar_wins_and_repeated_fields_keep_wire_order() -> None:
    answer = _delimited(1, b"a.example") + _tag(2, 0) + _varint(1)
    dns = (_tag(1, 0) + _varint(5) + _tag(1, 0) + _varint(6) + _delimited(4, b"first") + _delimited(4, b"second")
           + _delimited(7, answer) + _delimited(7, answer + _tag(3, 0) + _varint(60)) + _tag(2, 0) + _varint(1 << 40))
    sample = _tag(1, 0) + _varint(9) + _delimited(4, b"\x08\x00\x01\x02abc") + _tag(8, 0) + _varint(2)
    # Samples before the DNS messages they point at; a second flow_id; dns_index 0, 3 and 2**32 + 2 (truncated to 2).
    record = (_delimited(21, sample) + _delimited(1, b"one") + _delimited(1, b"two") + _tag(3, 0) + _varint(1)
              + _delimited(20, dns) + _delimited(20, dns) + _delimited(21, sample[:-2] + _tag(8, 0) + _varint(3))
              + _delimited(21, sample[:-2] + _tag(8, 0) + _varint(1 << 32 | 2)) + _delimited(21, b""))
    [back] = assert_same(_batch(record))
    assert back.flow_id == "two" and back.dns[0].qname == "second" and back.dns[0].id == 6 and back.dns[0].is_response
    assert [a.ttl for a in back.dns[0].answers] == [0, 60]
    assert [s.dns for s in back.samples] == [back.dns[1], None, back.dns[1], None]
    assert back.samples[0].icmp.type == 8 and back.samples[0].icmp.data == b"abc" and back.samples[3].icmp is None


@pytest.mark.parametrize("record", [
    _tag(3, 5) + b"\x06\x00\x00\x00",           # protocol as fixed32
    _tag(3, 1) + b"\x06" * 8,                   # protocol as fixed64
    _delimited(3, b"\x06"),                      # protocol length-delimited
    _tag(1, 0) + _varint(5),                     # flow_id as a varint
    _tag(20, 0) + _varint(5),                    # dns as a varint
    _tag(21, 3) + _tag(1, 0) + _varint(1) + _tag(21, 4),  # samples as a group
    _tag(21, 3) + _tag(21, 4) + _delimited(1, b"after"),
    _tag(99, 3) + _tag(0, 0) + _varint(1) + _tag(99, 4),  # field 0 inside an unknown group: skipped by upb
    _tag(0, 0) + _varint(1),                     # field 0 in a message
    _tag(99, 4),                                 # an end-group without a start
    _tag(99, 3) + _tag(98, 4),                   # a group closed by another number
    _tag(99, 3),                                 # a group never closed
    _tag(99, 6), _tag(99, 7) + b"\x00" * 8,      # wire types 6 and 7
    _tag(99, 1) + b"\x00" * 7, _tag(99, 5) + b"\x00" * 3,  # fixed fields cut short
    _tag(99, 0) + b"\xff" * 10 + b"\x01",         # a varint of eleven bytes
    _tag(99, 0) + b"\xff" * 9 + b"\x7f",          # ten bytes: the longest there is
    b"\x80\x80\x80\x80\x80\x08" + _varint(1),    # a tag padded past five bytes
    _tag(99, 2) + b"\xff\xff\xff\xff\x0f",        # a length of 2**32 - 1
    _tag(99, 2) + b"\xff\xff\xff\xff\xff\x01",    # a length past 32 bits
    _tag(99, 2) + _varint(1 << 31) + b"x",
    _varint(((1 << 29) - 1) << 3) + _varint(1),  # the largest field number
    _delimited(1, b"\xff"), _delimited(2, b"\xed\xa0\x80"), _delimited(18, b"\xc0\x80"),  # invalid UTF-8
    _delimited(19, "caf\u00e9 \U0001f600".encode()),  # valid multi-byte UTF-8
    _delimited(20, _delimited(4, b"\xf5\x80\x80\x80")), _delimited(20, _delimited(7, _delimited(4, b"\xe0\x80\x80"))),
    _delimited(21, _delimited(7, b"\xf4\x90\x80\x80")), _delimited(21, _delimited(4, b"\xff\xfe")),  # bytes: any
    _delimited(20, _tag(7, 0) + _varint(1)), _delimited(20, _tag(2, 0) + _varint(2)),
])
def test_odd_wire_reads_as_upb_reads_it(record) -> None:
    assert_same(_batch(record))
    assert_same(_batch(_delimited(1, b"x"), record, _delimited(1, b"y")))
    assert_same(VERSION_1 + record)  # the same field at the batch's own level


@pytest.mark.parametrize("where", [0, 1, 2, 3])
def test_nested_unknown_groups_hit_the_same_depth_limit_as_upb(where) -> None:
    """upb allows 100 levels of nesting counted from the batch: a group at the record level may nest one less."""
    wrap = [lambda g: VERSION_1 + g, lambda g: _batch(g), lambda g: _batch(_delimited(21, g)),
            lambda g: _batch(_delimited(20, _delimited(7, g)))][where]
    outcomes = []
    for depth in range(95, 103):
        outcomes.append(assert_same(wrap(_tag(99, 3) * depth + _tag(99, 4) * depth)) == "refused")
    assert outcomes[0] is False and outcomes[-1] is True


@pytest.mark.parametrize("length", [1 << 31, (1 << 32) - 1, 1 << 62])
def test_huge_lengths_are_refused_without_reading_past_the_end(length) -> None:
    for field in (2, 99):
        assert assert_same(VERSION_1 + _tag(field, 2) + _varint(length) + b"\x00" * 16) == "refused"
    assert assert_same(_batch(_tag(21, 2) + _varint(length))) == "refused"


def test_the_c_reader_refuses_with_value_error_and_checks_its_arguments() -> None:
    from appliance.native.fastpath import decode_records

    with pytest.raises(ValueError, match="version 2"):
        decode_records(_tag(1, 0) + _varint(2), *([object()] * 5), record_codec.TRANSPORT_OF_PROTOCOL)
    with pytest.raises(TypeError):
        decode_records(VERSION_1, *([object()] * 5), (Transport.OTHER,))
    with pytest.raises(TypeError):
        decode_records(VERSION_1)
    with pytest.raises(TypeError):
        decode_records("not bytes", *([object()] * 5), record_codec.TRANSPORT_OF_PROTOCOL)
    # A factory that fails: its exception comes out, nothing leaks or crashes.
    def broken(*args):
        raise RuntimeError("factory")
    with pytest.raises(RuntimeError, match="factory"):
        decode_records(_batch(_delimited(20, b"")), broken, broken, broken, broken, broken,
                       record_codec.TRANSPORT_OF_PROTOCOL)
