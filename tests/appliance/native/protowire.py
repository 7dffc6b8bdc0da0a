"""The protobuf wire format by hand: encoders for canonical and non-canonical bytes, and a scanner
of a `PacketBatch`'s framing that follows upb's rules (the parser the Python reference relied on).

upb's rules, as measured on the protobuf runtime pinned in requirements (see test_differential):
a tag is a varint of at most 5 bytes whose value fits in 32 bits; a length is a varint of at most
5 bytes below 2**31; any other varint has at most 10 bytes and keeps the low 64 bits; field number
0 is corrupt at a message's top level but tolerated inside an unknown group (except as the end tag);
wire types 6 and 7 are corrupt; groups nest at most 100 deep; a known field sent with another wire
type is kept as an unknown field.
"""

from __future__ import annotations

import random
import struct

VARINT, FIXED64, LEN, START_GROUP, END_GROUP, FIXED32 = 0, 1, 2, 3, 4, 5
MAX_GROUP_DEPTH = 100
_U64 = (1 << 64) - 1


class Malformed(Exception):
    """The bytes are not a well-formed protobuf encoding (upb would refuse them)."""


# -- encoding ---------------------------------------------------------------------------------
def varint(value: int, width: int = 0) -> bytes:
    """`value` (taken modulo 2**64, so a negative int32 becomes 10 bytes) as a varint, padded with
    redundant continuation bytes to `width` bytes when that is longer than its minimal form."""
    value &= _U64
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if not value:
            break
        out.append(byte | 0x80)
    out.append(byte)
    while len(out) < width:
        out[-1] |= 0x80
        out.append(0)
    return bytes(out)


def wide_varint(value: int, width: int) -> bytes:
    """A varint of exactly `width` bytes (at most 10) holding `value` bits beyond 64 included: the
    tenth byte may carry bits a parser must drop."""
    out = bytearray()
    for i in range(width):
        byte = (value >> (7 * i)) & 0x7F
        out.append(byte | (0x80 if i < width - 1 else 0))
    return bytes(out)


def tag(field: int, wire_type: int, width: int = 0) -> bytes:
    return varint((field << 3) | wire_type, width)


def field_varint(field: int, value: int, width: int = 0, tag_width: int = 0) -> bytes:
    return tag(field, VARINT, tag_width) + varint(value, width)


def field_bytes(field: int, data: bytes, length_width: int = 0, tag_width: int = 0) -> bytes:
    return tag(field, LEN, tag_width) + varint(len(data), length_width) + data


def field_fixed32(field: int, value: int) -> bytes:
    return tag(field, FIXED32) + struct.pack("<I", value & 0xFFFFFFFF)


def field_fixed64(field: int, value: int) -> bytes:
    return tag(field, FIXED64) + struct.pack("<Q", value & _U64)


def field_group(field: int, body: bytes = b"") -> bytes:
    return tag(field, START_GROUP) + body + tag(field, END_GROUP)


# -- scanning ---------------------------------------------------------------------------------
def _read_varint(data: bytes, pos: int, max_bytes: int) -> tuple[int, int]:
    value = 0
    for i in range(max_bytes):
        if pos >= len(data):
            raise Malformed("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            return value & _U64, pos
    raise Malformed("varint too long")


def _read_tag(data: bytes, pos: int) -> tuple[int, int, int]:
    value, pos = _read_varint(data, pos, 5)
    if value > 0xFFFFFFFF:
        raise Malformed("tag beyond 32 bits")
    return value >> 3, value & 7, pos


def _skip(data: bytes, pos: int, field: int, wire_type: int, depth: int) -> int:
    """Skip the value of one field whose tag was just read; returns the position after it."""
    if wire_type == VARINT:
        return _read_varint(data, pos, 10)[1]
    if wire_type in (FIXED64, FIXED32):
        end = pos + (8 if wire_type == FIXED64 else 4)
        if end > len(data):
            raise Malformed("truncated fixed-width value")
        return end
    if wire_type == LEN:
        length, pos = _read_varint(data, pos, 5)
        if length >= 1 << 31 or pos + length > len(data):
            raise Malformed("length beyond the end")
        return pos + length
    if wire_type == START_GROUP:
        if depth + 1 > MAX_GROUP_DEPTH:
            raise Malformed("groups nested too deep")
        while True:
            inner, inner_type, pos = _read_tag(data, pos)
            if inner_type == END_GROUP:
                if inner != field:
                    raise Malformed("end group does not match its start")
                return pos
            pos = _skip(data, pos, inner, inner_type, depth + 1)
    raise Malformed(f"wire type {wire_type}")


def split_batch(data: bytes) -> tuple[list[bytes], bool]:
    """The encoded `packets` of a PacketBatch in order, and whether the batch's own framing broke
    (the packets listed are then those before the break). Packets are not parsed here."""
    packets: list[bytes] = []
    pos = 0
    try:
        while pos < len(data):
            field, wire_type, pos = _read_tag(data, pos)
            if field == 0 or wire_type == END_GROUP:
                raise Malformed("field 0 or a stray end group")
            start = pos
            pos = _skip(data, pos, field, wire_type, 0)
            if field == 1 and wire_type == LEN:
                body = _read_varint(data, start, 5)[1]
                packets.append(data[body:pos])
    except Malformed:
        return packets, True
    return packets, False


# -- hostile bytes ------------------------------------------------------------------------------
def mutated(data: bytes, rng: random.Random) -> bytes:
    """`data` with 1-4 random edits: a byte replaced or a bit flipped, a few bytes deleted or inserted."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(out)) if out else 0
        action = rng.random()
        if action < 0.5 and out:
            out[at] = rng.randrange(256)
        elif action < 0.7 and out:
            out[at] ^= 1 << rng.randrange(8)
        elif action < 0.85:
            del out[at:at + rng.randint(1, 8)]
        else:
            out[at:at] = rng.randbytes(rng.randint(1, 8))
    return bytes(out)
