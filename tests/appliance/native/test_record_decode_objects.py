"""The objects fastpath.decode_records makes, compared one by one, type for type, with upb's (record_codec._decode_python).

The C reader shares equal strings and ints within a call and copies ASCII strings instead of decoding them
(appliance/native/fastpath.c, "reading flow record batches"): random batches written field by field, with
repeated, empty, non-ASCII and invalid UTF-8 names, scalars given twice and fields out of order, then mutated,
must read to the same classes, values and types, the same DNS links, fresh lists, and the same refusals.
"""

from __future__ import annotations

import dataclasses
import gc
import random
from typing import Any

import pytest

from appliance.flows import record_codec
from appliance.model import FlowRecord
from appliance.native.fastpath import DnsList, SampleList
from tests.appliance.native.protowire import field_bytes, field_varint, mutated

_NAMES = [b"", b"a", b"ab", b"example.com", b"www.example.com", b"www.example.con", b"x" * 7, b"x" * 8, b"x" * 9,
          b"x" * 15 + b"y", b"x" * 16, b"w" * 63 + b".example", b"\x00ctl\x7f", "caf\u00e9.example".encode(),
          "\u65e5\u672c.example".encode(), "\U0001f600".encode(), b"e\xcc\x81"]
_INVALID = [b"\xff", b"abc\xc3", b"\xed\xa0\x80x", b"\xc0\x80", b"abcdefgh\x80", b"\xf4\x90\x80\x80"]
_INTS = [0, 1, 255, 256, 257, 65535, 1 << 31, (1 << 32) - 1, 1 << 32, 1 << 40, (1 << 63) + 5, (1 << 64) - 1]
_U32 = "u32"


def _text(rng: random.Random, invalid: float) -> bytes:
    if rng.random() < invalid:
        return rng.choice(_INVALID)
    if rng.random() < 0.2:
        return bytes(rng.randrange(0x20, 0x7F) for _ in range(rng.randrange(12)))
    return rng.choice(_NAMES)


def _int(rng: random.Random) -> int:
    return rng.choice(_INTS) if rng.random() < 0.6 else rng.getrandbits(rng.choice([8, 16, 32, 64]))


def _message(rng: random.Random, fields: list[bytes]) -> bytes:
    """Fields in a random order now and then; a scalar given twice (the last one counts)."""
    if rng.random() < 0.2:
        rng.shuffle(fields)
    if fields and rng.random() < 0.1:
        fields.insert(rng.randrange(len(fields)), rng.choice(fields))
    return b"".join(fields)


def _scalars(rng: random.Random, numbers: list[int], present: float = 0.8) -> list[bytes]:
    return [field_varint(n, _int(rng)) for n in numbers if rng.random() < present]


def _strings(rng: random.Random, numbers: list[int], invalid: float, pool: list[bytes] | None = None) -> list[bytes]:
    return [field_bytes(n, rng.choice(pool) if pool and rng.random() < 0.8 else _text(rng, invalid))
            for n in numbers if rng.random() < 0.85]


def _dns(rng: random.Random, names: list[bytes], invalid: float) -> bytes:
    answers = []
    for _ in range(rng.choice([0, 0, 1, 2, 4])):
        answers.append(field_bytes(7, _message(rng, _scalars(rng, [2, 3]) + _strings(rng, [1, 4], invalid, names))))
    flags = [field_varint(n, rng.choice([0, 1, 2, 1 << 40])) for n in (2, 8) if rng.random() < 0.5]
    return _message(rng, _scalars(rng, [1, 3, 5, 6, 9]) + flags + _strings(rng, [4], invalid, names) + answers)


def _sample(rng: random.Random, ndns: int, invalid: float) -> bytes:
    payload = rng.choice([b"", b"\x08", b"\x08\x00\x01\x02", b"\x00\x00\xff\xffdata", rng.randbytes(rng.randrange(40))])
    fields = _scalars(rng, [1, 2, 3, 5, 6]) + _strings(rng, [7], invalid)
    fields += [field_bytes(4, payload)] if rng.random() < 0.9 else []
    fields += [field_varint(8, rng.randrange(ndns + 3))] if rng.random() < 0.7 else []
    return _message(rng, fields)


def _record(rng: random.Random, agents: list[bytes], invalid: float) -> bytes:
    names = [_text(rng, 0) for _ in range(3)]  # a flow's few names, repeated by its queries and answers
    dns = [_dns(rng, names, invalid) for _ in range(rng.choice([0, 0, 1, 2, 3, 8]))]
    samples = [_sample(rng, len(dns), invalid) for _ in range(rng.choice([0, 1, 2, 5]))]
    protocol = [field_varint(3, rng.choice([1, 6, 17, 0, 47, 255, 256 + 6]))] if rng.random() < 0.95 else []
    fields = protocol + _scalars(rng, list(range(4, 18))) + _strings(rng, [1], invalid)
    fields += _strings(rng, [2, 18, 19], invalid, agents)
    fields += [field_bytes(20, d) for d in dns] + [field_bytes(21, s) for s in samples]
    return _message(rng, fields)


def random_batch(rng: random.Random, invalid: float = 0.0) -> bytes:
    agents = [b"agent-1", b"agent-2", b"idle", b"tcp_close", b""]
    records = [_record(rng, agents, invalid) for _ in range(rng.randrange(1, 12))]
    return field_varint(1, 1) + b"".join(field_bytes(2, r) for r in records)


def assert_identical(made: Any, expected: Any, path: str = "batch") -> None:
    """Equal and of the same type at every level (True and 1 are equal; a bool is not an int here). A flow's DNS
    messages come as a DnsList (appliance/native/dns_list.h) and its samples, when it has any, as a SampleList
    (sample_list.h) where upb gives a list: their messages and packets are compared."""
    wanted = type(expected)
    if path.endswith(".dns") and type(expected) is list:
        wanted = DnsList
    elif path.endswith(".samples") and type(expected) is list and expected:
        wanted = SampleList
    assert type(made) is wanted, f"{path}: {type(made).__name__} != {wanted.__name__}"
    if dataclasses.is_dataclass(expected):
        assert gc.is_tracked(made), path  # the collector sees them as it sees the class's own
        for f in dataclasses.fields(expected):
            assert_identical(getattr(made, f.name), getattr(expected, f.name), f"{path}.{f.name}")
    elif isinstance(expected, (list, tuple)):
        assert len(made) == len(expected), path
        assert made == expected, path
        for i, (a, b) in enumerate(zip(made, expected)):
            assert_identical(a, b, f"{path}[{i}]")
    else:
        assert made == expected, path


def _dns_links(records: list[FlowRecord]) -> list[list[int | None]]:
    return [[None if s.dns is None else next(i for i, m in enumerate(r.dns) if m is s.dns) for s in r.samples]
            for r in records]


def _outcome(decode: Any, data: bytes) -> list[FlowRecord] | str:
    try:
        return decode(data)
    except record_codec.RecordError:
        return "refused"


def assert_same_objects(data: bytes) -> list[FlowRecord] | str:
    made, expected = _outcome(record_codec.decode, data), _outcome(record_codec._decode_python, data)
    if made == "refused" or expected == "refused":
        assert made == expected, data.hex()
        return made
    assert_identical(made, expected)
    assert _dns_links(made) == _dns_links(expected)
    lists = [x for r in made for x in (r.dns, r.samples, *(m.answers for m in r.dns))]
    assert len({id(x) for x in lists}) == len(lists)  # no list is shared: every one may be changed on its own
    return made


def test_random_batches_read_to_upbs_objects() -> None:
    rng = random.Random(20261124)
    shared = 0
    for _ in range(400):
        made = assert_same_objects(random_batch(rng))
        assert isinstance(made, list)
        names = [m.qname for r in made for m in r.dns if len(m.qname) > 1]
        shared += len(names) - len({id(n) for n in names})
    assert shared > 100  # the batches repeat names, and the reader shares them


def test_random_batches_with_invalid_utf8_are_refused_where_upb_refuses_them() -> None:
    rng = random.Random(11)
    outcomes = {"refused": 0, "read": 0}
    for _ in range(400):
        outcomes["refused" if assert_same_objects(random_batch(rng, invalid=0.02)) == "refused" else "read"] += 1
    assert outcomes["refused"] > 50 and outcomes["read"] > 50


def test_mutated_random_batches() -> None:
    rng = random.Random(7)
    outcomes = {"refused": 0, "read": 0}
    for _ in range(1500):
        outcomes["refused" if assert_same_objects(mutated(random_batch(rng), rng)) == "refused" else "read"] += 1
    assert outcomes["refused"] > 100 and outcomes["read"] > 100


def test_a_sample_mask_only_leaves_samples_out() -> None:
    rng = random.Random(3)
    mask = record_codec.sample_mask({1, 6})
    for _ in range(100):
        data = random_batch(rng)
        expected = record_codec._decode_python(data)
        for r in expected:
            if not (r.protocol < 256 and mask[r.protocol]):
                r.samples = []
        assert_identical(record_codec.decode(data, mask), expected)


def test_random_dns_batches_read_to_upbs_objects() -> None:
    """decode_dns_batch shares the DNS message reader and its caches: the same typed comparison, mutations included."""
    rng = random.Random(17)
    outcomes = {"refused": 0, "read": 0}
    for _ in range(300):
        names = [_text(rng, 0) for _ in range(3)]
        items = [_message(rng, _strings(rng, [1], 0.01, [b"agent-1", b"agent-2"]) + [field_bytes(2, _dns(rng, names, 0.01))]
                          + ([field_varint(3, rng.choice([0, 1, 7]))] if rng.random() < 0.5 else []))
                 for _ in range(rng.randrange(1, 10))]
        data = b"".join(field_bytes(1, item) for item in items)
        for batch in (data, mutated(data, rng)):
            try:
                expected = record_codec._decode_dns_python(batch)
            except record_codec.RecordError:
                expected = "refused"
            try:
                made = record_codec.decode_dns(batch)
            except record_codec.RecordError:
                made = "refused"
            outcomes["refused" if made == "refused" else "read"] += 1
            if made == "refused" or expected == "refused":
                assert made == expected, batch.hex()
            else:
                assert_identical(made, expected)
    assert outcomes["refused"] > 50 and outcomes["read"] > 300


@pytest.mark.parametrize(("fields", "bad"), [
    ([field_bytes(2, b"\xff"), field_bytes(1, b"ab\xc3")], b"\xff"),  # the first in wire order, not in field order
    ([field_bytes(19, b"plain"), field_bytes(19, b"\xc0\x80"), field_bytes(19, b"plain")], b"\xc0\x80"),  # overwritten
    ([field_bytes(20, field_bytes(4, b"example.org")), field_bytes(20, field_bytes(4, b"x\xed\xa0\x80"))], b"x\xed\xa0\x80"),
    ([field_bytes(20, field_bytes(7, field_bytes(4, b"\xf4\x90\x80\x80"))), field_bytes(2, b"\xff")], b"\xf4\x90\x80\x80"),
])
def test_invalid_utf8_fails_with_the_decoders_error_for_the_first_bad_string(fields, bad) -> None:
    """A string is copied when ASCII and decoded where it is read otherwise: the error is the UTF-8 decoder's
    own, for the first invalid string on the wire, even one a later value would have replaced."""
    try:
        bad.decode("utf-8")
    except UnicodeDecodeError as err:
        reason = str(err)
    with pytest.raises(record_codec.RecordError) as refused:
        record_codec.decode(field_varint(1, 1) + field_bytes(2, b"".join(fields)))
    assert str(refused.value) == f"not a flow record batch of version {record_codec.VERSION}: {reason}"


def test_shared_strings_are_the_right_ones_across_records_and_agents() -> None:
    """Names that differ only in their last byte or their length are never taken for each other."""
    names = [b"x" * 8, b"x" * 7 + b"y", b"x" * 9, b"x" * 7, "x\u00e9".encode(), b"x" * 8]
    dns = b"".join(field_bytes(20, field_bytes(4, n) + field_bytes(7, field_bytes(1, n) + field_bytes(4, n)))
                   for n in names)
    records = [field_bytes(2, a) + dns for a in (b"agent-1", b"agent-2", b"agent-1")]
    made = assert_same_objects(field_varint(1, 1) + b"".join(field_bytes(2, r) for r in records))
    assert isinstance(made, list)
    assert [m.qname for m in made[2].dns] == [n.decode() for n in names]
    assert made[0].agent_id is made[2].agent_id and made[0].dns[0].qname is made[0].dns[5].qname


def test_no_leak_on_read_refused_or_mutated_batches() -> None:
    """Every shared str and int is released with the call, whether the batch reads or fails halfway."""
    import tracemalloc

    rng = random.Random(5)
    batches = [random_batch(rng, invalid=0.02) for _ in range(40)]
    batches += [mutated(b, rng) for b in batches]

    def once() -> None:
        for data in batches:
            try:  # not pytest.raises: its exception info outlives the call and would be counted here
                record_codec.decode(data, record_codec.sample_mask({6}))
            except record_codec.RecordError:
                pass

    for _ in range(20):
        once()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(200):
            once()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 16_384, grown
