"""Differential tests: the C fast path against the pure-Python reference model it replaced.

The converter and the tracker must be exactly equivalent to tests/appliance/native/reference_model.py:
same packets, same rejection and repair counts, same flows handed over in the same calls, same
snapshots and counters. Inputs are seeded random streams and scenarios (a failure names its seed).

By default the subject is the real implementation (`PacketConverter`, `FlowTracker`); with
FASTPATH_DIFF_SUBJECT=reference the reference runs against itself, which checks the harness. The
`test_the_harness_*` tests always run and make sure a deliberately broken subject is caught.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from dataclasses import dataclass

import pytest

from appliance.flows.tracker import FlowTracker
from appliance.generated import sensor_pb2
from appliance.ingest.convert import ConvertLimits, PacketConverter
from tests.appliance import wire
from tests.appliance.native import protowire as pw
from tests.appliance.native.flow_scenarios import FlowScenario
from tests.appliance.native.oracle import FIX_PROCESS_NAME, MALFORMED, OracleConverter, OracleFlowTracker
from tests.appliance.native.reference_model import ReferenceConverter
from tests.appliance.native.streams import (
    BAD_UTF8_NAMES, BASE_MS, FIELD_NUMBERS, encode_batch, encode_packet, packet_fields, random_now_ns, random_packet,
)


@dataclass(frozen=True)
class Subject:
    """The converter and tracker classes under test."""

    converter: type
    tracker: type


REFERENCE = Subject(OracleConverter, OracleFlowTracker)


@pytest.fixture(scope="module")
def subject() -> Subject:
    if os.environ.get("FASTPATH_DIFF_SUBJECT", "native") == "reference":
        return REFERENCE
    return Subject(PacketConverter, FlowTracker)


def _shape(raws: list) -> list:
    """Raw packets with the type of every field, so that 6 == 6.0 or b"" == bytearray() cannot pass."""
    return [(raw, tuple(type(v).__name__ for v in raw)) for raw in raws]


def assert_same_read(got: list, converter: object, expected: list, reference: object, context: str) -> None:
    assert _shape(got) == _shape(expected), f"packets differ: {context}"
    assert converter.rejected == reference.rejected, f"rejected counts differ: {context}"
    assert converter.repaired == reference.repaired, f"repaired counts differ: {context}"


def _limits(rng: random.Random) -> ConvertLimits:
    return ConvertLimits(max_payload_bytes=rng.choice([0, 16, 64, 65535]),
                         future_tolerance_ns=rng.choice([600 * 10**9, 600 * 10**9, 0, 1]))


def _first_divergence(converter_class: type, limits: ConvertLimits, messages: list, now_ns: int) -> str:
    """The first message that alone reads differently: the reproducer of a converter failure."""
    for message in messages:
        conv, ref = converter_class(limits), ReferenceConverter(limits)
        got, want = conv.read_wire(message.SerializeToString(), False, now_ns), ref.read([message], now_ns)
        if (_shape(got), conv.rejected, conv.repaired) != (_shape(want), ref.rejected, ref.repaired):
            return (f"\nreproducer: PacketConverter({limits}).read_wire(bytes.fromhex("
                    f"{message.SerializeToString().hex()!r}), False, {now_ns})\n  message: {message!r}\n"
                    f"  got {got} {conv.rejected} {conv.repaired}\n  want {want} {ref.rejected} {ref.repaired}")
    return "\n(no single message diverges alone)"


# -- 1. converter ------------------------------------------------------------------------------
def check_converter_seed(converter_class: type, seed: int) -> None:
    rng = random.Random(seed)
    limits = _limits(rng)
    now_ns = random_now_ns(rng)
    messages = [random_packet(rng, now_ns, limits.max_payload_bytes, limits.future_tolerance_ns)
                for _ in range(rng.randint(0, 40))]
    reference = ReferenceConverter(limits)
    expected = reference.read(messages, now_ns)
    context = f"seed {seed}, {limits}, now_ns={now_ns}"
    try:
        conv = converter_class(limits)
        batch = sensor_pb2.PacketBatch(packets=messages).SerializeToString()
        assert_same_read(conv.read_wire(batch, True, now_ns), conv, expected, reference, "read_wire batched " + context)
        conv = converter_class(limits)
        one_by_one = [raw for m in messages for raw in conv.read_wire(m.SerializeToString(), False, now_ns)]
        assert_same_read(one_by_one, conv, expected, reference, "read_wire one by one " + context)
        conv = converter_class(limits)
        assert_same_read(conv.read(messages, now_ns), conv, expected, reference, "read " + context)
    except AssertionError as err:
        raise AssertionError(str(err) + _first_divergence(converter_class, limits, messages, now_ns)) from err


@pytest.mark.parametrize("block", range(8))
def test_converter_reads_random_packets_like_the_reference(subject, block):
    for seed in range(block * 50, block * 50 + 50):
        check_converter_seed(subject.converter, seed)


# -- 2. wire encodings -------------------------------------------------------------------------
def check_encoding_seed(converter_class: type, seed: int) -> None:
    """Non-canonical but valid encodings, some with a process name that is not UTF-8 or a broken
    packet: the subject must read them as upb (through the oracle) does."""
    rng = random.Random(10_000 + seed)
    limits = _limits(rng)
    now_ns = random_now_ns(rng)
    bodies = []
    for _ in range(rng.randint(0, 12)):
        fields = packet_fields(random_packet(rng, now_ns, limits.max_payload_bytes, limits.future_tolerance_ns))
        if rng.random() < 0.2:
            fields["process_name"] = rng.choice(BAD_UTF8_NAMES)
        body = encode_packet(rng, fields)
        if rng.random() < 0.1 and body:
            body = body[:rng.randrange(len(body))] + b"\x80"  # ends in a truncated varint
        bodies.append(body)
    data = encode_batch(rng, bodies)
    conv, oracle = converter_class(limits), OracleConverter(limits)
    context = f"seed {seed}, {limits}, now_ns={now_ns}, data=bytes.fromhex({data.hex()!r})"
    assert_same_read(conv.read_wire(data, True, now_ns), conv, oracle.read_wire(data, True, now_ns), oracle, context)
    for body in bodies:
        conv, oracle = converter_class(limits), OracleConverter(limits)
        context = f"seed {seed}, {limits}, now_ns={now_ns}, packet=bytes.fromhex({body.hex()!r})"
        assert_same_read(conv.read_wire(body, False, now_ns), conv, oracle.read_wire(body, False, now_ns), oracle, context)


@pytest.mark.parametrize("block", range(4))
def test_non_canonical_encodings_read_like_their_upb_parse(subject, block):
    for seed in range(block * 100, block * 100 + 100):
        check_encoding_seed(subject.converter, seed)


def _fields(**changes: object) -> dict[str, object]:
    fields: dict[str, object] = {
        "local_ip": 0x0A000005, "remote_ip": 0x5DB8D822, "local_port": 40000, "remote_port": 443,
        "protocol": 6, "timestamp": BASE_MS, "direction": 1, "size": 60, "payload": b"hello",
        "tcp_flags": 0x12, "pid": 7, "process_name": b"curl",
    }
    fields.update(changes)
    return fields


def _encode(fields: dict[str, object], order: list[str] | None = None) -> bytes:
    """The plain encoding of `fields` (in `order`), defaults omitted as proto3 does."""
    out = b""
    for name in order or list(fields):
        value = fields[name]
        if value in (0, b""):
            continue
        number = FIELD_NUMBERS[name]
        out += pw.field_bytes(number, value) if isinstance(value, bytes) else pw.field_varint(number, value)
    return out


GOOD = _encode(_fields())
assert GOOD[:5] == pw.field_varint(1, 0x0A000005)
SECOND = _encode(_fields(remote_ip=0x01010101, remote_port=80, payload=b"", process_name=b""))
U32 = 1 << 32
# Encodings upb accepts although no protobuf library writes them.
NON_CANONICAL = {
    "fields in reverse order": _encode(_fields(), list(reversed(list(_fields())))),
    "a field repeated, the last wins": (pw.field_varint(1, 0x01020304) + pw.field_bytes(9, b"first")
                                        + pw.field_bytes(12, b"first") + GOOD),
    "defaults written out": (pw.field_varint(10, 0) + pw.field_varint(11, 0) + pw.field_bytes(12, b"")
                             + pw.field_bytes(9, b"") + _encode(_fields(tcp_flags=0, pid=0, process_name=b"", payload=b""))),
    "unknown varint field": pw.field_varint(13, 2**64 - 1) + GOOD,
    "unknown fixed64 field": GOOD + pw.field_fixed64(100, 12345),
    "unknown length-delimited field": pw.field_bytes(2047, b"\xff\x00junk") + GOOD,
    "unknown fixed32 field between two known ones": GOOD[:5] + pw.field_fixed32(16, 7) + GOOD[5:],
    "unknown group": pw.field_group(15, pw.field_varint(1, 9) + pw.field_bytes(9, b"inside")) + GOOD,
    "unknown groups nested 20 deep": pw.tag(15, pw.START_GROUP) * 20 + pw.tag(15, pw.END_GROUP) * 20 + GOOD,
    "unknown field of the highest number": pw.field_varint(2**29 - 1, 1) + GOOD,
    "field 0 inside an unknown group (upb tolerates it)": pw.field_group(15, pw.field_varint(0, 1)) + GOOD,
    "overlong varints": b"".join(pw.field_varint(n, v, width=10) for n, v in [(1, 5), (2, 6), (7, 1), (5, 17), (6, BASE_MS)]),
    "varint of zero padded 0x80 0x80 0x00": pw.tag(10, pw.VARINT) + b"\x80\x80\x00" + GOOD,
    "overlong tags": b"".join(pw.field_varint(n, v, tag_width=5) for n, v in [(1, 5), (2, 6), (7, 2), (5, 1)]),
    "overlong lengths": GOOD + pw.field_bytes(9, b"payload", length_width=5) + pw.field_bytes(12, b"name", length_width=5),
    "uint32 fields carrying high bits": b"".join(pw.field_varint(n, v + k * U32) for n, v, k in [
        (1, 5, 1), (2, 6, 0xFFFFFFFF), (3, 53, 7), (4, 443, 1), (5, 17, 1), (8, 99, 3), (10, 2, 5), (11, 8, 9), (7, 1, 0)]),
    "a port that is 53 modulo 2**32": _encode(_fields(protocol=17, remote_port=53 + U32)),
    "a protocol that is 6 modulo 2**32": _encode(_fields(protocol=6 + 5 * U32)),
    "direction as a negative int32 (10 bytes)": _encode(_fields(direction=-1)),
    "direction -2**31": _encode(_fields(direction=-(2**31))),
    "direction 2**32 + 1 (OUTBOUND as int32)": _encode(_fields(direction=U32 + 1)),
    "direction 2**32 + 2 (INBOUND as int32)": _encode(_fields(direction=U32 + 2)),
    "direction 2**31 + 1 (negative as int32)": _encode(_fields(direction=2**31 + 1)),
    "timestamp with bits beyond 64 in its tenth byte": (pw.tag(6, pw.VARINT) + pw.wide_varint(BASE_MS + (5 << 64), 10)
                                                        + _encode(_fields(timestamp=0))),
    "timestamp 2**64 - 1": _encode(_fields(timestamp=2**64 - 1)),
    "timestamp whose nanoseconds wrap 64 bits": _encode(_fields(timestamp=18_446_744_073_709_552)),
    "local_ip with the wrong wire type": pw.field_fixed32(1, 0x0A000005) + _encode(_fields(local_ip=0)),
    "payload with the wrong wire type": pw.field_varint(9, 5) + _encode(_fields(payload=b"")),
    "process_name as a group": pw.field_group(12, pw.field_varint(1, 1)) + _encode(_fields(process_name=b"")),
    "the wrong wire type after the value": GOOD + pw.field_fixed64(2, 1) + pw.field_varint(12, 1),
    "an empty message": b"",
    "NUL in the process name": _encode(_fields(process_name=b"a\x00b")),
}
BAD_NAMES = {f"process name {name[:12]!r}... not UTF-8": _encode(_fields(process_name=name)) for name in BAD_UTF8_NAMES}
BAD_NAMES.update({
    "a name not UTF-8, then a good one (the last wins)": GOOD + pw.field_bytes(12, b"\xff") + pw.field_bytes(12, b"good"),
    "a good name, then one not UTF-8": GOOD + pw.field_bytes(12, b"\xffbad"),
    "a name not UTF-8 on a rejected packet": _encode(_fields(local_ip=0, process_name=b"\xff")),
    "a name not UTF-8 on a packet with a repaired timestamp": _encode(_fields(timestamp=0, process_name=b"\xc0\x80")),
})
# Encodings upb refuses: the subject must count them as malformed_message, and not crash.
BROKEN = {
    "truncated varint": GOOD + pw.tag(1, pw.VARINT) + b"\x80",
    "truncated in the middle of a varint": GOOD[:4],
    "length beyond the end": GOOD + pw.tag(9, pw.LEN) + b"\x10abc",
    "field number 0": pw.field_varint(0, 1) + GOOD,
    "field number 0 as a length-delimited field": GOOD + pw.field_bytes(0, b"x"),
    "wire type 6": GOOD + pw.tag(13, 6) + b"\x00",
    "wire type 7": pw.tag(13, 7) + GOOD,
    "unterminated group": GOOD + pw.tag(15, pw.START_GROUP) + pw.field_varint(1, 1),
    "mismatched end group": pw.tag(15, pw.START_GROUP) + pw.tag(16, pw.END_GROUP) + GOOD,
    "stray end group": GOOD + pw.tag(15, pw.END_GROUP),
    "end group of field 0 inside a group": pw.tag(15, pw.START_GROUP) + pw.tag(0, pw.END_GROUP) + GOOD,
    "varint of 11 bytes": GOOD + pw.tag(13, pw.VARINT) + b"\x80" * 10 + b"\x00",
    "tag of 6 bytes": GOOD + b"\x88\x80\x80\x80\x80\x00" + b"\x05",
    "tag beyond 32 bits": GOOD + b"\x88\x80\x80\x80\x70" + b"\x05",
    "length of 6 bytes": GOOD + pw.tag(9, pw.LEN) + b"\x81\x80\x80\x80\x80\x00" + b"x",
    "length of 2**31": GOOD + pw.tag(9, pw.LEN) + pw.varint(2**31) + b"x",
    "length of 2**32 + 1 (1 modulo 2**32)": GOOD + pw.tag(9, pw.LEN) + pw.varint(U32 + 1) + b"x",
    "truncated fixed32": GOOD + pw.tag(13, pw.FIXED32) + b"\x01\x02",
    "truncated fixed64": GOOD + pw.tag(13, pw.FIXED64) + b"\x01\x02\x03\x04\x05\x06\x07",
    "groups nested 1000 deep": pw.tag(15, pw.START_GROUP) * 1000 + pw.tag(15, pw.END_GROUP) * 1000 + GOOD,
    "groups nested 200000 deep, unterminated": pw.tag(15, pw.START_GROUP) * 200_000,
    "a broken group inside a group": pw.field_group(15, pw.tag(16, pw.START_GROUP) + b"\x80") + GOOD,
}


def _cases() -> list:
    cases = []
    for table in (NON_CANONICAL, BAD_NAMES, BROKEN):
        for name, body in table.items():
            cases.append(pytest.param(body, False, id=f"packet: {name}"))
            cases.append(pytest.param(pw.field_bytes(1, SECOND) + pw.field_bytes(1, body) + pw.field_bytes(1, GOOD),
                                      True, id=f"in a batch: {name}"))
    batches = {
        "unknown fields of every wire type between packets": (
            pw.field_varint(2, 1) + pw.field_bytes(1, GOOD) + pw.field_fixed64(3, 1) + pw.field_bytes(4, b"x")
            + pw.field_fixed32(5, 1) + pw.field_group(6, pw.field_bytes(1, GOOD)) + pw.field_bytes(1, SECOND)),
        "packets sent with the wrong wire types (ignored)": (
            pw.field_varint(1, 5) + pw.field_fixed32(1, 5) + pw.field_fixed64(1, 5)
            + pw.field_group(1, GOOD) + pw.field_bytes(1, GOOD)),
        "an empty packet": pw.field_bytes(1, b"") + pw.field_bytes(1, GOOD),
        "overlong tags and lengths of packets": pw.field_bytes(1, GOOD, length_width=5, tag_width=5) + pw.field_bytes(1, SECOND, length_width=3),
        "two broken packets between good ones": (pw.field_bytes(1, GOOD) + pw.field_bytes(1, b"\x80") + pw.field_bytes(1, SECOND)
                                                 + pw.field_bytes(1, pw.field_varint(0, 1)) + pw.field_bytes(1, GOOD)),
        "an empty batch": b"",
        "300 packets": pw.field_bytes(1, GOOD) * 150 + pw.field_bytes(1, SECOND) * 150,
    }
    cases += [pytest.param(data, True, id=f"batch: {name}") for name, data in batches.items()]
    return cases


@pytest.mark.parametrize("data,batched", _cases())
def test_hand_encoded_bytes_read_like_their_upb_parse(subject, data, batched):
    now_ns = (BASE_MS + 60_000) * 1_000_000
    conv, oracle = subject.converter(ConvertLimits()), OracleConverter(ConvertLimits())
    got = conv.read_wire(data, batched, now_ns)
    assert_same_read(got, conv, oracle.read_wire(data, batched, now_ns), oracle, f"data=bytes.fromhex({data[:400].hex()!r})")


def test_hand_encoded_cases_are_what_their_names_say():
    """Pins the upb behaviour the cases rely on: accepted, refused for UTF-8 alone, or broken."""
    for name, body in NON_CANONICAL.items():
        sensor_pb2.NetworkPacket.FromString(body)  # raises if upb refuses it
    for table, reason in ((BAD_NAMES, "bad UTF-8"), (BROKEN, "broken")):
        for name, body in table.items():
            with pytest.raises(Exception):
                sensor_pb2.NetworkPacket.FromString(body)
            oracle = OracleConverter()
            oracle.read_wire(body, False, BASE_MS * 1_000_000)
            assert (MALFORMED in oracle.rejected) == (reason == "broken"), name


def _mutate(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(out) + 1)
        kind = rng.randrange(6)
        if kind == 0 and out:
            out[min(at, len(out) - 1)] ^= 1 << rng.randrange(8)
        elif kind == 1 and out:
            out[min(at, len(out) - 1)] = rng.choice([0x00, 0x80, 0xFF, 0x7F, 0x08, 0x0A, 0x0B, 0x0C, 0x04, 0x03])
        elif kind == 2:
            del out[at:]
        elif kind == 3:
            out[at:at] = rng.randbytes(rng.randint(1, 6))
        elif kind == 4:
            del out[at:at + rng.randint(1, 8)]
        else:
            out[at:at] = out[at:at + rng.randint(1, 12)]
    return bytes(out)


def check_mutation_seed(converter_class: type, seed: int) -> None:
    """A mutated batch never raises; one whose framing survives reads exactly like the oracle;
    one whose framing breaks is counted; and the next, valid, batch reads normally."""
    rng = random.Random(20_000 + seed)
    limits = ConvertLimits(max_payload_bytes=rng.choice([64, 65535]))
    now_ns = random_now_ns(rng)
    conv = converter_class(limits)
    for _ in range(20):
        messages = [random_packet(rng, now_ns, limits.max_payload_bytes) for _ in range(rng.randint(1, 6))]
        if rng.random() < 0.5:
            data = sensor_pb2.PacketBatch(packets=messages).SerializeToString()
        else:
            data = encode_batch(rng, [encode_packet(rng, packet_fields(m)) for m in messages])
        batched = rng.random() < 0.8
        if not batched:
            data = messages[0].SerializeToString()
        data = _mutate(rng, data)
        context = f"seed {seed}, {limits}, now_ns={now_ns}, batched={batched}, data=bytes.fromhex({data.hex()!r})"
        oracle = OracleConverter(limits)
        rejected, repaired = Counter(conv.rejected), Counter(conv.repaired)
        got = conv.read_wire(data, batched, now_ns)
        got_rejected, got_repaired = Counter(conv.rejected) - rejected, Counter(conv.repaired) - repaired
        if batched and OracleConverter.framing_breaks(data):
            assert got_rejected[MALFORMED] >= 1, f"a batch with broken framing was not counted: {context}"
        else:
            want = oracle.read_wire(data, batched, now_ns)
            assert _shape(got) == _shape(want), f"packets differ: {context}"
            assert (got_rejected, got_repaired) == (Counter(oracle.rejected), Counter(oracle.repaired)), f"counts differ: {context}"
        follow = sensor_pb2.PacketBatch(packets=messages).SerializeToString()
        oracle = ReferenceConverter(limits)
        rejected, repaired = Counter(conv.rejected), Counter(conv.repaired)
        got = conv.read_wire(follow, True, now_ns)
        assert _shape(got) == _shape(oracle.read(messages, now_ns)), f"a valid batch after a mutated one: {context}"
        assert (Counter(conv.rejected) - rejected, Counter(conv.repaired) - repaired) == (
            Counter(oracle.rejected), Counter(oracle.repaired)), f"counts of a valid batch after a mutated one: {context}"


@pytest.mark.parametrize("block", range(4))
def test_mutated_bytes_never_raise_and_leave_the_converter_sound(subject, block):
    for seed in range(block * 50, block * 50 + 50):
        check_mutation_seed(subject.converter, seed)


# -- 3. tracker ------------------------------------------------------------------------------
def run_tracker_seed(subject: Subject, seed: int, steps: int = 70) -> FlowScenario:
    scenario = FlowScenario(seed, [("subject", subject.tracker, "packets", None)])
    scenario.run(steps)
    return scenario


@pytest.mark.parametrize("block", range(5))
def test_tracker_matches_the_reference_on_random_scenarios(subject, block):
    stats = Counter()
    for seed in range(block * 40, block * 40 + 40):
        stats.update(run_tracker_seed(subject, seed).stats)
    # The sweeps must really be exercised, not all dropped as ambiguous.
    assert stats["sweeps_dropped"] < stats["sweeps_planned"] / 2, stats


def test_tracker_matches_the_reference_on_thousands_of_flows(subject):
    for seed in range(6):
        FlowScenario(90_000 + seed, [("subject", subject.tracker, "packets", None)], wide=True).run(25)


def test_tracker_matches_the_reference_with_limits_and_timeouts_at_their_edges(subject):
    for seed in range(30):
        FlowScenario(95_000 + seed, [("subject", subject.tracker, "packets", None)], extreme=True).run(40)


def test_flush_all_takes_any_reason_like_the_reference(subject):
    expired, wanted = [], []
    tracker, reference = subject.tracker(expired.extend), OracleFlowTracker(wanted.extend)
    raws = ReferenceConverter().read([wire.packet(ts_ms=BASE_MS)], (BASE_MS + 1) * 1_000_000)
    for t in (tracker, reference):
        t.add_packets("agent", raws)
        t.flush_all("reload")
    assert expired == wanted and wanted[0].end_reason == "reload"


def test_snapshot_with_a_limit_below_one_is_empty_like_the_reference(subject):
    tracker, reference = subject.tracker(lambda flows: None), OracleFlowTracker(lambda flows: None)
    raws = ReferenceConverter().read([wire.packet(ts_ms=BASE_MS)], (BASE_MS + 1) * 1_000_000)
    for t in (tracker, reference):
        t.add_packets("agent", raws)
    for limit in (0, -1, -(2**40)):
        assert tracker.snapshot(limit=limit) == reference.snapshot(limit=limit) == []


def run_wire_seed(subject: Subject, seed: int, steps: int = 50) -> FlowScenario:
    scenario = FlowScenario(50_000 + seed, [
        ("add_wire", subject.tracker, "wire", subject.converter),
        ("add_packets(read_wire)", subject.tracker, "read_wire", subject.converter),
    ], wire=True)
    scenario.run(steps)
    return scenario


@pytest.mark.parametrize("block", range(2))
def test_add_wire_equals_add_packets_of_read_wire_and_the_reference(subject, block):
    for seed in range(block * 30, block * 30 + 30):
        run_wire_seed(subject, seed)


def test_add_wire_of_mutated_bytes_equals_add_packets_of_read_wire(subject):
    """Where the oracle cannot say what a broken batch yields, the two entry points still agree."""
    for seed in range(40):
        rng = random.Random(70_000 + seed)
        now_ns = random_now_ns(rng)
        twins = []
        for with_reader in (True, False):
            expired: list = []
            converter = subject.converter(ConvertLimits())
            tracker = subject.tracker(expired.extend, None, None, None, reader=converter.wire if with_reader else None)
            twins.append((tracker, converter, expired))
        (wired, wired_conv, wired_expired), (packets, packets_conv, packets_expired) = twins
        for _ in range(10):
            messages = [random_packet(rng, now_ns) for _ in range(rng.randint(1, 8))]
            data = _mutate(rng, sensor_pb2.PacketBatch(packets=messages).SerializeToString())
            agent = rng.choice(["a", "b"])
            before = sum(packets_conv.rejected.values())
            raws = packets_conv.read_wire(data, True, now_ns)
            packets.add_packets(agent, raws)
            result = wired.add_wire(agent, data, True, now_ns)
            context = f"seed {seed}, now_ns={now_ns}, data=bytes.fromhex({data.hex()!r})"
            assert result == (len(raws), sum(packets_conv.rejected.values()) - before), context
            assert (wired_conv.rejected, wired_conv.repaired) == (packets_conv.rejected, packets_conv.repaired), context
            assert wired.snapshot() == packets.snapshot(), context
            assert wired_expired == packets_expired, context
        wired.flush_all()
        packets.flush_all()
        assert wired_expired == packets_expired


# -- 4. the harness itself ---------------------------------------------------------------------
def test_the_harness_passes_the_reference_against_itself():
    for seed in range(5):
        check_converter_seed(OracleConverter, seed)
        check_encoding_seed(OracleConverter, seed)
        check_mutation_seed(OracleConverter, seed)
        run_tracker_seed(REFERENCE, seed)
        run_wire_seed(REFERENCE, seed)


class _PayloadCapOffByOne(OracleConverter):
    def __init__(self, limits=None):
        super().__init__(limits)
        self._max_payload += 1


class _ToleranceOffByOne(OracleConverter):
    def __init__(self, limits=None):
        super().__init__(limits)
        self._future_ns -= 1


class _NamesCutAt255(OracleConverter):
    def read(self, messages, now_ns=None):
        return [raw[:11] + (raw[11][:255],) for raw in super().read(messages, now_ns)]


class _NameRepairNotCounted(OracleConverter):
    def read_wire(self, data, batched, now_ns=None):
        out = super().read_wire(data, batched, now_ns)
        self.repaired.pop(FIX_PROCESS_NAME, None)
        return out


class _MalformedCountedOncePerBatch(OracleConverter):
    def read_wire(self, data, batched, now_ns=None):
        before = self.rejected.get(MALFORMED, 0)
        out = super().read_wire(data, batched, now_ns)
        if self.rejected.get(MALFORMED, 0) > before + 1:
            self.rejected[MALFORMED] = before + 1
        return out


@pytest.mark.parametrize("broken,check", [
    (_PayloadCapOffByOne, check_converter_seed),
    (_ToleranceOffByOne, check_converter_seed),
    (_NamesCutAt255, check_converter_seed),
    (_NameRepairNotCounted, check_encoding_seed),
    (_MalformedCountedOncePerBatch, check_encoding_seed),
])
def test_the_harness_catches_a_broken_converter(broken, check):
    with pytest.raises(AssertionError):
        for seed in range(60):
            check(broken, seed)


class _EvictionTiesGoToTheLast(OracleFlowTracker):
    def _evict_oldest(self):
        best = None
        for agent in self._agents.values():
            for table in agent.tables.values():
                if table:
                    key, flow = next(iter(table.items()))
                    idle = agent.clock_ns - flow.last_ns
                    if best is None or idle >= best[0]:
                        best = (idle, table, key)
        if best is not None:
            self._end(best[1], best[2], "evicted")


class _OneHandOffPerFlow(OracleFlowTracker):
    def _hand_off(self):
        ended, self._ended = self._ended, []
        for flow in ended:
            self._on_expire([flow])


class _IdleBoundaryExclusive(OracleFlowTracker):
    def _expire_idle(self, agent, clock_ns):
        for cls, table in agent.tables.items():
            horizon = clock_ns - self._idle_ns[cls]
            while table:
                key, flow = next(iter(table.items()))
                if flow.last_ns >= horizon:
                    break
                self._end(table, key, "idle")


class _SnapshotByLastPacketTime(OracleFlowTracker):
    """What snapshot promised before issue 19: the newest by `last_ns`. Timestamps in the scenarios go
    back, so it differs from update order, and the harness must see it."""

    def snapshot(self, agent_id=None, limit=100):
        flows = super().snapshot(agent_id, 10**9)
        return sorted(flows, key=lambda f: f.last_ns, reverse=True)[:max(limit, 0)]


class _SnapshotAgentsInTurn(OracleFlowTracker):
    """Each agent's flows in update order, but the agents one after the other (a merge that skips the heap)."""

    def snapshot(self, agent_id=None, limit=100):
        flows = super().snapshot(agent_id, 10**9)
        return sorted(flows, key=lambda f: list(self._agents).index(f.agent_id))[:max(limit, 0)]


class _QuietThresholdHalfASecond(OracleFlowTracker):
    def sweep(self, now_wall=None):
        for agent in self._agents.values():
            if 0.5 <= now_wall - agent.wall < 1.0:
                agent.wall -= 0.5
        super().sweep(now_wall)


@pytest.mark.parametrize("broken", [
    _EvictionTiesGoToTheLast, _OneHandOffPerFlow, _IdleBoundaryExclusive, _SnapshotByLastPacketTime,
    _SnapshotAgentsInTurn, _QuietThresholdHalfASecond,
])
def test_the_harness_catches_a_broken_tracker(broken):
    with pytest.raises(AssertionError):
        for seed in range(40):
            run_tracker_seed(Subject(OracleConverter, broken), seed)
