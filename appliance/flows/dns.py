"""DNS message metadata parser (RFC 1035) for port-53 payloads.

Best effort by design: a malformed or truncated message yields what could be read with
`malformed=True`; it never raises. Compression pointers are followed with a hop limit so a
pointer loop cannot spin.
"""

from __future__ import annotations

import socket
import struct

from appliance.model import DnsAnswer, DnsMessage

_HEADER = struct.Struct("!HHHHHH")
_RR_FIXED = struct.Struct("!HHIH")
_MAX_POINTER_HOPS = 32
_MAX_ANSWERS = 32
# Labels one message may make the parser read, pointers included: a crafted message of a few
# hundred compressed names must cost microseconds, not milliseconds (it is parsed on the hot path).
_LABEL_BUDGET = 512
_NAME_TYPES = {2, 5, 12}  # NS, CNAME, PTR: rdata is one name

TYPE_A = 1
TYPE_NS = 2
TYPE_CNAME = 5
TYPE_PTR = 12
TYPE_MX = 15
TYPE_TXT = 16
TYPE_AAAA = 28
TYPE_NULL = 10


class _Malformed(Exception):
    """Internal: the message ends or points somewhere it cannot."""


class _Budget:
    """Labels left to read in this message."""

    __slots__ = ("left",)

    def __init__(self) -> None:
        self.left = _LABEL_BUDGET


def _skip_name(buf: bytes, offset: int) -> int:
    """The offset after the name at `offset`, without following compression pointers."""
    while True:
        if offset >= len(buf):
            raise _Malformed("name runs past the end")
        n = buf[offset]
        if n == 0:
            return offset + 1
        if n & 0xC0 == 0xC0:
            return offset + 2
        if n & 0xC0:
            raise _Malformed("reserved label type")
        offset += 1 + n


def _read_name(buf: bytes, offset: int, budget: _Budget) -> tuple[str, int]:
    """Read a possibly compressed name at `offset`; return it and the offset after it."""
    labels: list[str] = []
    end = -1
    hops = 0
    length_total = 0
    while True:
        if offset >= len(buf):
            raise _Malformed("name runs past the end")
        n = buf[offset]
        if n == 0:
            offset += 1
            break
        budget.left -= 1
        if budget.left < 0:
            raise _Malformed("too many labels in one message")
        kind = n & 0xC0
        if kind == 0xC0:
            if offset + 1 >= len(buf):
                raise _Malformed("truncated pointer")
            hops += 1
            if hops > _MAX_POINTER_HOPS:
                raise _Malformed("compression pointer loop")
            if end < 0:
                end = offset + 2
            offset = ((n & 0x3F) << 8) | buf[offset + 1]
            continue
        if kind != 0:
            raise _Malformed("reserved label type")
        label = buf[offset + 1 : offset + 1 + n]
        if len(label) != n:
            raise _Malformed("truncated label")
        length_total += n + 1
        if length_total > 255:
            raise _Malformed("name longer than 255 octets")
        labels.append(label.decode("ascii", "backslashreplace").lower())
        offset += 1 + n
    return ".".join(labels), (end if end >= 0 else offset)


def _rdata_text(buf: bytes, rtype: int, start: int, rdlen: int, budget: _Budget) -> str:
    rdata = buf[start : start + rdlen]
    if rtype == TYPE_A and rdlen == 4:
        return socket.inet_ntop(socket.AF_INET, rdata)
    if rtype == TYPE_AAAA and rdlen == 16:
        return socket.inet_ntop(socket.AF_INET6, rdata)
    if rtype in _NAME_TYPES:
        return _read_name(buf, start, budget)[0]
    if rtype == TYPE_MX and rdlen >= 3:
        return _read_name(buf, start + 2, budget)[0]
    if rtype == TYPE_TXT:
        parts: list[str] = []
        i = 0
        while i < len(rdata):
            n = rdata[i]
            parts.append(rdata[i + 1 : i + 1 + n].decode("ascii", "backslashreplace"))
            i += 1 + n
        return "".join(parts)
    return rdata.hex()


def parse_dns(payload: bytes, timestamp_ns: int = 0) -> DnsMessage | None:
    """Parse DNS metadata from a UDP payload (no length prefix); None when not even a header fits."""
    if len(payload) < _HEADER.size:
        return None
    ident, flags, qdcount, ancount, _ns, _ar = _HEADER.unpack_from(payload, 0)
    msg = DnsMessage(
        id=ident,
        is_response=bool(flags & 0x8000),
        rcode=flags & 0x000F,
        qname="",
        qtype=0,
        qclass=0,
        timestamp_ns=timestamp_ns,
    )
    offset = _HEADER.size
    budget = _Budget()
    try:
        for index in range(qdcount):
            # Only the first question is kept (real resolvers send one); the others are skipped
            # without following their pointers.
            if index == 0:
                msg.qname, offset = _read_name(payload, offset, budget)
            else:
                offset = _skip_name(payload, offset)
            if offset + 4 > len(payload):
                raise _Malformed("truncated question")
            if index == 0:
                msg.qtype, msg.qclass = struct.unpack_from("!HH", payload, offset)
            offset += 4
        for _ in range(min(ancount, _MAX_ANSWERS)):
            name, offset = _read_name(payload, offset, budget)
            if offset + _RR_FIXED.size > len(payload):
                raise _Malformed("truncated resource record")
            rtype, _rclass, ttl, rdlen = _RR_FIXED.unpack_from(payload, offset)
            offset += _RR_FIXED.size
            if offset + rdlen > len(payload):
                raise _Malformed("rdata runs past the end")
            msg.answers.append(DnsAnswer(name, rtype, ttl, _rdata_text(payload, rtype, offset, rdlen, budget)))
            offset += rdlen
    except (_Malformed, struct.error, ValueError, IndexError):
        msg.malformed = True
    return msg


ADDRESS_TYPES = (1, 28)  # A, AAAA


def resolves(message: DnsMessage) -> bool:
    """A response that names its question and answers it with an address: all the resolver cache learns from
    (appliance.detection.resolutions), so the only DNS messages handed over ahead of their flow. The C table
    decides the same with DnsWire.resolves (appliance/native/dns_wire.h)."""
    return message.is_response and bool(message.qname) and any(a.rtype in ADDRESS_TYPES for a in message.answers)


def parse_dns_tcp(payload: bytes, timestamp_ns: int = 0) -> DnsMessage | None:
    """Parse the first DNS message of a TCP segment (2-byte length prefix, RFC 1035 4.2.2)."""
    if len(payload) < 2 + _HEADER.size:
        return None
    msg = parse_dns(payload[2:], timestamp_ns)
    if msg is not None and int.from_bytes(payload[:2], "big") > len(payload) - 2:
        msg.malformed = True
    return msg
