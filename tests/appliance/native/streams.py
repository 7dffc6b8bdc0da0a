"""Random NetworkPacket streams full of hostile values, and random non-canonical (but valid)
encodings of them: the input of the converter and wire differential tests."""

from __future__ import annotations

import random

from appliance.generated import sensor_pb2
from tests.appliance.native import protowire as pw

BASE_MS = 1_700_000_000_000
FIELD_NUMBERS = {f.name: f.number for f in sensor_pb2.NetworkPacket.DESCRIPTOR.fields}
_UINT32 = ("local_ip", "remote_ip", "local_port", "remote_port", "protocol", "size", "tcp_flags", "pid")

PROCESS_NAMES = [
    "", "", "", "curl", "chrome.exe", "naïve-café", "进程", "😀😀😀", "\x00nul", "tab\tname",
    "a" * 255, "a" * 256, "a" * 257, "a" * 300, "é" * 300, "😀" * 257,
    "x" * 255 + "😀" + "y" * 9,  # the 256th character takes 4 bytes
    "中" * 254 + "ab" + "cd",
]
# Process names that are not UTF-8 (only the wire can carry them), and Python's reading of them.
BAD_UTF8_NAMES = [
    b"\xff", b"caf\xe9", b"\xed\xa0\x80", b"\xc0\x80", b"\xf0\x9f\x98", b"\xf4\x90\x80\x80", b"ok\x80",
    b"\xe2\x82" + b"a" * 300, "é".encode() * 200 + b"\xfe" + b"z" * 100, b"\xf8\x88\x80\x80\x80",
    b"\xe0\x80\xaf", b"a\xf0\x9f\x98\x80\xf0\x9fb", b"\x80" * 300,
]
# Timestamps in ms whose nanoseconds overflow 64-bit arithmetic, or sit on the tolerance boundary.
HOSTILE_TIMESTAMPS = [1, 9_223_372_036_854, 9_223_372_036_855, 18_446_744_073_709, 18_446_744_073_710,
                      18_446_744_073_709_552, 2**63 - 1, 2**63, 2**64 - 1]


def random_now_ns(rng: random.Random) -> int:
    """The converter's `now`: sometimes on a millisecond, so that the tolerance boundary is reachable."""
    now_ms = BASE_MS + rng.randrange(10**9)
    return now_ms * 1_000_000 + (0 if rng.random() < 0.5 else rng.randrange(1_000_000))


def _ip(rng: random.Random) -> int:
    return rng.choice([0, rng.getrandbits(32), 0x0A000005, 0x5DB8D822, 1, 0xFFFFFFFF, 0x08080808])


def _port(rng: random.Random) -> int:
    return rng.choice([0, 53, 443, 40000, rng.randrange(65536), 65535, 65536, 70000, 2**32 - 1])


def _timestamp(rng: random.Random, now_ns: int, tolerance_ns: int) -> int:
    now_ms = now_ns // 1_000_000
    horizon_ms = (now_ns + tolerance_ns) // 1_000_000
    return rng.choice([
        0, now_ms - rng.randrange(10**7), now_ms, horizon_ms, horizon_ms + 1, horizon_ms - 1,
        now_ms + rng.randrange(max(1, tolerance_ns // 1_000_000)), now_ms * 1000, rng.choice(HOSTILE_TIMESTAMPS),
    ])


def _payload(rng: random.Random, protocol: int, direction: int, max_payload: int) -> bytes:
    kind = rng.random()
    if kind < 0.15:
        return b""
    if kind < 0.35:
        return rng.randbytes(rng.randint(1, 7))  # shorter than a UDP header
    if kind < 0.45 and protocol == 1:
        return rng.randbytes(rng.randint(1, 3))  # shorter than an ICMP header
    if kind < 0.55:
        return rng.randbytes(max_payload + rng.randint(0, 9))  # at and beyond the cap
    if kind < 0.6:
        return rng.randbytes(8)
    return rng.randbytes(rng.randint(0, min(max_payload + 8, 200)))


def random_packet(rng: random.Random, now_ns: int, max_payload: int = 65535,
                  tolerance_ns: int = 600 * 1_000_000_000) -> sensor_pb2.NetworkPacket:
    """One NetworkPacket, valid or not in any of the ways the converter checks."""
    direction = rng.choice([1, 1, 1, 2, 2, 2, 0, 7, -1, 2**31 - 1, -(2**31)])
    protocol = rng.choice([6, 6, 6, 17, 17, 17, 1, 1, 0, 47, 255, 256, 2**32 - 1])
    big_payload = max_payload <= 4096 or rng.random() < 0.02
    return sensor_pb2.NetworkPacket(
        local_ip=_ip(rng), remote_ip=_ip(rng), local_port=_port(rng), remote_port=_port(rng),
        protocol=protocol, timestamp=_timestamp(rng, now_ns, tolerance_ns), direction=direction,
        size=rng.choice([0, rng.randrange(1500), 2**32 - 1]),
        payload=_payload(rng, protocol, direction, max_payload if big_payload else 200),
        tcp_flags=rng.choice([0, 0, rng.randrange(256), 0x12, 0x11, 0x04, 2**32 - 1]),
        pid=rng.choice([0, 0, rng.randrange(1, 70000), 2**32 - 1]),
        process_name=rng.choice(PROCESS_NAMES),
    )


# -- non-canonical encodings ----------------------------------------------------------------
def packet_fields(pb: sensor_pb2.NetworkPacket) -> dict[str, object]:
    """The field values of a packet, the process name as bytes (so it can be made not UTF-8)."""
    fields: dict[str, object] = {name: getattr(pb, name) for name in FIELD_NUMBERS}
    fields["process_name"] = pb.process_name.encode()
    return fields


def unknown_field(rng: random.Random, depth: int = 0) -> bytes:
    """A field of a number the schema does not know, of any wire type (a group holds more)."""
    number = rng.choice([13, 15, 16, 100, 2047, 19_000, 2**29 - 1])
    kind = rng.choice(["varint", "fixed64", "len", "fixed32", "group"] if depth < 3 else ["varint", "len"])
    if kind == "varint":
        return pw.field_varint(number, rng.getrandbits(64), width=rng.choice([0, 10]))
    if kind == "fixed64":
        return pw.field_fixed64(number, rng.getrandbits(64))
    if kind == "fixed32":
        return pw.field_fixed32(number, rng.getrandbits(32))
    if kind == "len":
        return pw.field_bytes(number, rng.randbytes(rng.randint(0, 12)))
    return pw.field_group(number, b"".join(unknown_field(rng, depth + 1) for _ in range(rng.randint(0, 3))))


def _wrong_type(rng: random.Random, number: int, length_delimited: bool) -> bytes:
    """A known field sent with a wire type it does not have: upb keeps it as an unknown field."""
    choices = [pw.field_fixed32(number, rng.getrandbits(32)), pw.field_fixed64(number, rng.getrandbits(64)),
               pw.field_group(number, unknown_field(rng, 3))]
    if length_delimited:
        choices.append(pw.field_varint(number, rng.getrandbits(32)))
    else:
        choices.append(pw.field_bytes(number, rng.randbytes(4)))
    return rng.choice(choices)


def _encode_field(rng: random.Random, name: str, value: object) -> bytes:
    number = FIELD_NUMBERS[name]
    tag_width = rng.choice([0, 0, 0, 2, 5])
    if isinstance(value, bytes):
        return pw.field_bytes(number, value, length_width=rng.choice([0, 0, 0, 2, 5]), tag_width=tag_width)
    assert isinstance(value, int)
    wire_value = value
    if name in _UINT32 and rng.random() < 0.25:
        wire_value = value + (rng.getrandbits(32) << 32)  # upb keeps the low 32 bits
    elif name == "direction" and rng.random() < 0.4:
        wire_value = (value & 0xFFFFFFFF) + (rng.getrandbits(32) << 32)  # int32: the low 32 bits
    elif name == "timestamp" and rng.random() < 0.15:
        return pw.tag(number, pw.VARINT, tag_width) + pw.wide_varint(value + (rng.randrange(1, 64) << 64), 10)
    return pw.tag(number, pw.VARINT, tag_width) + pw.varint(wire_value, width=rng.choice([0, 0, 0, 3, 10]))


def _decoy(rng: random.Random, value: object) -> object:
    if isinstance(value, bytes):
        return rng.choice([b"", rng.randbytes(5), b"decoy"]) if rng.random() < 0.5 else b"decoy"
    return rng.getrandbits(32)


def encode_packet(rng: random.Random, fields: dict[str, object]) -> bytes:
    """A valid encoding of `fields` as upb reads it, rarely the canonical one: fields out of order,
    defaults written out, earlier occurrences overridden (last wins), unknown fields and known
    fields of the wrong wire type in between, overlong varints, tags and lengths, 32-bit fields
    carrying high bits."""
    parts: list[bytes] = []
    for name in rng.sample(list(fields), len(fields)):
        value = fields[name]
        number = FIELD_NUMBERS[name]
        length_delimited = isinstance(value, bytes)
        overridden = rng.random() < 0.15
        if overridden:
            decoy = _decoy(rng, value)
            if name == "process_name":
                decoy = b"decoy"  # a decoy that is not UTF-8 is a case of its own (see the wire tests)
            parts.append(_encode_field(rng, name, decoy))
        if rng.random() < 0.1:
            parts.append(_wrong_type(rng, number, length_delimited))
        if rng.random() < 0.15:
            parts.append(unknown_field(rng))
        if value in (0, b"") and not overridden and rng.random() < 0.6:
            continue
        parts.append(_encode_field(rng, name, value))
        if rng.random() < 0.05:
            parts.append(_wrong_type(rng, number, length_delimited))  # after the value: must not reset it
    return b"".join(parts)


def encode_batch(rng: random.Random, packets: list[bytes]) -> bytes:
    """A valid PacketBatch around encoded packets, with unknown fields (and `packets` sent with
    the wrong wire type, which upb ignores) between them."""
    parts: list[bytes] = []
    for body in packets:
        if rng.random() < 0.2:
            parts.append(unknown_field(rng))
        if rng.random() < 0.05:
            parts.append(_wrong_type(rng, 1, length_delimited=True))
        parts.append(pw.field_bytes(1, body, length_width=rng.choice([0, 0, 0, 3, 5]),
                                    tag_width=rng.choice([0, 0, 0, 2])))
    if rng.random() < 0.3:
        parts.append(unknown_field(rng))
    return b"".join(parts)
