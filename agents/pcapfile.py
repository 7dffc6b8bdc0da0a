"""Readers of capture files: classic pcap (both byte orders, micro- and nanosecond) and pcapng.

`read_capture(path)` yields `Frame`s with the original timestamps in nanoseconds and the link type
of the interface each frame was captured on. A damaged record stops the file with CaptureFileError
naming the offset; a truncated last record (a capture cut short) ends it quietly.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, NamedTuple

from agents.errors import CaptureFileError

_PCAP_MAGICS = {
    b"\xd4\xc3\xb2\xa1": ("<", 1_000),      # little endian, microseconds
    b"\xa1\xb2\xc3\xd4": (">", 1_000),
    b"\x4d\x3c\xb2\xa1": ("<", 1),          # little endian, nanoseconds
    b"\xa1\xb2\x3c\x4d": (">", 1),
}
_PCAPNG_SHB = b"\x0a\x0d\x0d\x0a"
_MAX_RECORD = 256 * 1024 * 1024  # larger than any real frame: a corrupt length, not a packet

# pcapng block types
_IDB = 0x00000001
_OPB = 0x00000002  # obsolete packet block, still written by old tools
_SPB = 0x00000003
_EPB = 0x00000006
_SHB = 0x0A0D0D0A
_OPT_IF_TSRESOL = 9


class Frame(NamedTuple):
    """One captured frame."""

    timestamp_ns: int
    linktype: int
    data: bytes
    original_length: int


def read_capture(path: str | Path) -> Iterator[Frame]:
    """Frames of a pcap or pcapng file, in file order."""
    path = Path(path)
    try:
        handle = path.open("rb")
    except OSError as err:
        raise CaptureFileError(f"{path}: cannot open: {err.strerror}") from None
    with handle:
        magic = handle.read(4)
        if magic == _PCAPNG_SHB:
            yield from _read_pcapng(handle, path)
        elif magic in _PCAP_MAGICS:
            yield from _read_pcap(handle, path, magic)
        else:
            raise CaptureFileError(f"{path}: not a pcap or pcapng file (starts with {magic.hex() or 'nothing'})")


def _read_pcap(handle: BinaryIO, path: Path, magic: bytes) -> Iterator[Frame]:
    order, to_ns = _PCAP_MAGICS[magic]
    header = handle.read(20)
    if len(header) < 20:
        raise CaptureFileError(f"{path}: pcap header cut short")
    _major, _minor, _zone, _sigfigs, _snaplen, network = struct.unpack(order + "HHiIII", header)
    linktype = network & 0x0FFFFFFF  # the top bits carry FCS information
    record = struct.Struct(order + "IIII")
    offset = 24
    while True:
        head = handle.read(16)
        if len(head) < 16:
            return
        seconds, fraction, caplen, origlen = record.unpack(head)
        if caplen > _MAX_RECORD:
            raise CaptureFileError(f"{path}: record at offset {offset} claims {caplen} bytes")
        data = handle.read(caplen)
        if len(data) < caplen:
            return
        yield Frame(seconds * 1_000_000_000 + fraction * to_ns, linktype, data, origlen)
        offset += 16 + caplen


class _Interface(NamedTuple):
    linktype: int
    snaplen: int
    units_per_second: int


def _tsresol(options: bytes, order: str) -> int:
    """Timestamp units per second from an IDB's options (default: microseconds)."""
    pos = 0
    while pos + 4 <= len(options):
        code, length = struct.unpack_from(order + "HH", options, pos)
        if code == 0:
            break
        value = options[pos + 4 : pos + 4 + length]
        if code == _OPT_IF_TSRESOL and length >= 1:
            exponent = value[0]
            return 2 ** (exponent & 0x7F) if exponent & 0x80 else 10**exponent
        pos += 4 + (length + 3) // 4 * 4
    return 1_000_000


def _read_pcapng(handle: BinaryIO, path: Path) -> Iterator[Frame]:
    order = "<"
    interfaces: list[_Interface] = []
    offset = 0
    last_ns = 0
    first = True
    while True:
        head = handle.read(8) if not first else _PCAPNG_SHB + handle.read(4)
        first = False
        if len(head) < 8:
            return
        block_type_raw = head[:4]
        if block_type_raw == _PCAPNG_SHB:
            body_start = handle.read(4)
            if len(body_start) < 4:
                return
            if body_start == b"\x4d\x3c\x2b\x1a":
                order = "<"
            elif body_start == b"\x1a\x2b\x3c\x4d":
                order = ">"
            else:
                raise CaptureFileError(f"{path}: section header at offset {offset} has a bad byte-order magic")
            total = struct.unpack(order + "I", head[4:8])[0]
            if total < 28 or total % 4 or total > _MAX_RECORD:
                raise CaptureFileError(f"{path}: section header at offset {offset} has a bad length {total}")
            rest = handle.read(total - 12)
            if len(rest) < total - 12:
                return
            interfaces = []  # interface ids are per section
            offset += total
            continue
        block_type, total = struct.unpack(order + "II", head)
        if total < 12 or total % 4 or total > _MAX_RECORD:
            raise CaptureFileError(f"{path}: block at offset {offset} has a bad length {total}")
        body = handle.read(total - 8)
        if len(body) < total - 8:
            return
        body = body[:-4]  # the trailing copy of the length
        if block_type == _IDB:
            if len(body) < 8:
                raise CaptureFileError(f"{path}: interface block at offset {offset} is too short")
            linktype, _reserved, snaplen = struct.unpack_from(order + "HHI", body)
            interfaces.append(_Interface(linktype, snaplen, _tsresol(body[8:], order)))
        elif block_type == _EPB or block_type == _OPB:
            if block_type == _EPB:
                if len(body) < 20:
                    raise CaptureFileError(f"{path}: packet block at offset {offset} is too short")
                iface_id, high, low, caplen, origlen = struct.unpack_from(order + "IIIII", body)
                data_at = 20
            else:
                if len(body) < 20:
                    raise CaptureFileError(f"{path}: packet block at offset {offset} is too short")
                iface_id, _drops, high, low, caplen, origlen = struct.unpack_from(order + "HHIIII", body)
                data_at = 20
            if iface_id >= len(interfaces):
                raise CaptureFileError(f"{path}: packet block at offset {offset} names unknown interface {iface_id}")
            iface = interfaces[iface_id]
            caplen = min(caplen, len(body) - data_at)
            units = (high << 32) | low
            last_ns = units * 1_000_000_000 // iface.units_per_second
            yield Frame(last_ns, iface.linktype, body[data_at : data_at + caplen], origlen)
        elif block_type == _SPB:
            if not interfaces or len(body) < 4:
                raise CaptureFileError(f"{path}: simple packet block at offset {offset} without an interface")
            origlen = struct.unpack_from(order + "I", body)[0]
            iface = interfaces[0]
            caplen = min(origlen, len(body) - 4, iface.snaplen or origlen)
            # Simple blocks carry no timestamp: keep the last one seen so time never runs backwards.
            yield Frame(last_ns, iface.linktype, body[4 : 4 + caplen], origlen)
        offset += total
