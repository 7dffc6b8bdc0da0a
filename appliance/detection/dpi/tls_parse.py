"""TLS handshake parsing: ClientHello and ServerHello (RFC 8446 4.1.2-4.1.3, RFC 5246 7.4.1, RFC 6066 3,
RFC 7301 3.1).

Parsing is bounded and linear: one pass over at most `MAX_HANDSHAKE_BYTES` of the first TLS records of
a direction, every length checked against what is left, no recursion. A hello cut short by the sample
size or split over records is still read as far as its bytes go (`complete` says whether it was whole);
anything that is not a hello gives None. Nothing here raises on hostile input.

The hellos are read in C (appliance/native/tls_hello.h: a Chrome-shaped hello takes 12.6 us to parse in this
Python, 1.2 us there); `parse_client_hello_reference` and `parse_server_hello_reference` are the Python the C
equals, field for field, which tests/appliance/native/test_tls_hello.py checks on real, cut, hostile and mutated
hellos.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from appliance.native import dpi as native_dpi

_VERSIONS = {0x0300: "SSLv3", 0x0301: "TLSv1.0", 0x0302: "TLSv1.1", 0x0303: "TLSv1.2", 0x0304: "TLSv1.3"}
MAX_HANDSHAKE_BYTES = 16_384  # one hello never needs more than a full record (Chrome's with PQ keys: ~1.8 KB)
_HANDSHAKE = 0x16
_CLIENT_HELLO, _SERVER_HELLO = 1, 2
_TWO_U16 = struct.Struct("!HH")
_U16S = [struct.Struct(f"!{n}H") for n in range(128)]  # the list lengths hellos use, compiled once
EXT_SNI, EXT_GROUPS, EXT_POINT_FORMATS, EXT_SIG_ALGS, EXT_ALPN, EXT_VERSIONS = 0, 10, 11, 13, 16, 43


def is_grease(value: int) -> bool:
    """RFC 8701 GREASE values (0x0a0a, 0x1a1a ... 0xfafa): ignored by every fingerprint."""
    return value & 0x0F0F == 0x0A0A and value >> 8 == value & 0xFF


@dataclass(slots=True)
class ClientHello:
    version: str  # the highest version offered (supported_versions when present)
    sni: str  # "" when the hello carries no server_name
    legacy_version: int = 0  # ClientHello.legacy_version (0x0303 for TLS 1.2 and 1.3)
    # Tuples: a hello is read for every TLS flow, and immutable defaults cost no factory call.
    ciphers: tuple[int, ...] = ()  # wire order, GREASE included
    extensions: tuple[int, ...] = ()  # wire order, GREASE included
    supported_versions: tuple[int, ...] = ()
    signature_algorithms: tuple[int, ...] = ()
    groups: tuple[int, ...] = ()
    point_formats: tuple[int, ...] = ()
    alpn: tuple[bytes, ...] = ()  # protocol names as sent
    has_sni_extension: bool = False
    complete: bool = True  # False when the bytes ended inside the hello

    @property
    def max_version(self) -> int:
        offered = [v for v in self.supported_versions if not is_grease(v)]
        return max(offered) if offered else self.legacy_version


@dataclass(slots=True)
class ServerHello:
    legacy_version: int
    cipher: int
    extensions: tuple[int, ...] = ()
    selected_version: int = 0  # supported_versions extension (TLS 1.3), 0 when absent
    alpn: bytes = b""
    complete: bool = True

    @property
    def version(self) -> int:
        return self.selected_version or self.legacy_version


def version_name(value: int) -> str:
    return _VERSIONS.get(value, f"0x{value:04x}")


def handshake_message(payload: bytes, wanted: int) -> tuple[bytes, bool] | None:
    """The body of the first handshake message of type `wanted`, joined over TLS records.

    Returns (body, complete): complete is False when the bytes end before the message does.
    None when `payload` does not start with a handshake record or the message is another type.
    """
    data = handshake_stream(payload)
    if len(data) < 4 or data[0] != wanted:
        return None
    length = int.from_bytes(data[1:4], "big")
    body = bytes(data[4 : 4 + length])
    return body, len(body) == length


_CERTIFICATE = 11
MAX_CERTIFICATES = 8  # a chain longer than this is cut (real ones have 2-4)


def handshake_stream(payload: bytes) -> bytes:
    """The handshake bytes of the TLS records at the start of `payload`, joined, at most MAX_HANDSHAKE_BYTES.

    Stops at the first record that is not a handshake (ChangeCipherSpec, application data): in TLS 1.3
    everything after the ServerHello is encrypted, so only TLS 1.2 and earlier show their certificates.
    """
    parts: list[bytes] = []
    pos = 0
    end = min(len(payload), MAX_HANDSHAKE_BYTES)
    while pos + 5 <= end and payload[pos] == _HANDSHAKE and payload[pos + 1] == 3:
        length = int.from_bytes(payload[pos + 3 : pos + 5], "big")
        parts.append(payload[pos + 5 : min(pos + 5 + length, end)])
        pos += 5 + length
    return parts[0] if len(parts) == 1 else b"".join(parts)


def certificate_chain(payload: bytes) -> tuple[list[bytes], bool] | None:
    """The DER certificates of the first Certificate message in `payload` (a server's flight, TLS <= 1.2).

    Returns (certificates, complete), leaf first; complete is False when the bytes end inside the
    message (a chain larger than the samples). None when the flight holds no Certificate message.
    """
    stream = handshake_stream(payload)
    pos = 0
    while pos + 4 <= len(stream):
        kind, length = stream[pos], int.from_bytes(stream[pos + 1 : pos + 4], "big")
        if kind == _CERTIFICATE:
            r = _Reader(stream, pos + 4, pos + 4 + length)
            chain: list[bytes] = []
            try:
                total = int.from_bytes(r.take(3), "big")
                r.end = min(r.end, r.pos + total)
                while r.left() > 0 and len(chain) < MAX_CERTIFICATES:
                    chain.append(r.take(int.from_bytes(r.take(3), "big")))
            except _Short:
                return chain, False
            return chain, pos + 4 + length <= len(stream)
        pos += 4 + length
    return None


class _Reader:
    """Cursor over one message: every read is bounded by the bytes left (short reads end parsing)."""

    __slots__ = ("data", "pos", "end")

    def __init__(self, data: bytes, pos: int = 0, end: int | None = None) -> None:
        self.data, self.pos = data, pos
        self.end = len(data) if end is None else min(end, len(data))

    def left(self) -> int:
        return self.end - self.pos

    def u8(self) -> int:
        if self.pos >= self.end:
            raise _Short
        self.pos += 1
        return self.data[self.pos - 1]

    def u16(self) -> int:
        if self.pos + 2 > self.end:
            raise _Short
        self.pos += 2
        return int.from_bytes(self.data[self.pos - 2 : self.pos], "big")

    def take(self, n: int) -> bytes:
        if self.pos + n > self.end:
            raise _Short
        self.pos += n
        return self.data[self.pos - n : self.pos]

    def u16_list(self, length: int) -> tuple[int, ...]:
        count = length // 2
        if self.pos + 2 * count > self.end:
            raise _Short
        values = _U16S[count].unpack_from(self.data, self.pos) if count < len(_U16S) else \
            struct.unpack_from(f"!{count}H", self.data, self.pos)
        self.pos += length - length % 2
        return values


class _Short(Exception):
    """The message ended before a field it announced."""


def _read_extensions(r: _Reader, on_extension: object) -> tuple[tuple[int, ...], bool]:
    types: list[int] = []
    try:
        total = r.u16()
        ext = _Reader(r.data, r.pos, r.pos + total)
        complete = ext.end - ext.pos == total
        data, end = ext.data, ext.end
        while end - ext.pos >= 4:
            ext_type, length = _TWO_U16.unpack_from(data, ext.pos)
            ext.pos += 4
            types.append(ext_type)
            body = ext.data[ext.pos : ext.pos + length]
            if len(body) < length:
                complete = False
            ext.pos += length
            on_extension(ext_type, body)  # type: ignore[operator]
        return tuple(types), complete and ext.left() == 0
    except _Short:
        return tuple(types), False


def _alpn_names(body: bytes) -> list[bytes]:
    r = _Reader(body, 2, 2 + int.from_bytes(body[:2], "big") if len(body) >= 2 else 0)
    names: list[bytes] = []
    try:
        while r.left() > 0 and len(names) < 32:
            names.append(r.take(r.u8()))
    except _Short:
        pass
    return names


def parse_client_hello(payload: bytes) -> ClientHello | None:
    """The ClientHello at the start of `payload` (TLS records); None when it is not one."""
    found = native_dpi.client_hello(payload)
    return None if found is None else ClientHello(*found[0])


def parse_server_hello(payload: bytes) -> ServerHello | None:
    """The ServerHello at the start of `payload` (TLS records); None when it is not one."""
    found = native_dpi.server_hello(payload)
    return None if found is None else ServerHello(*found[0])


def parse_client_hello_reference(payload: bytes) -> ClientHello | None:
    """`parse_client_hello` in Python: what the C must give (used by the tests)."""
    found = handshake_message(payload, _CLIENT_HELLO)
    if found is None:
        return None
    body, complete = found
    r = _Reader(body)
    hello = ClientHello("", "", complete=complete)
    try:
        hello.legacy_version = r.u16()
        r.take(32)  # random
        r.take(r.u8())  # legacy_session_id
        hello.ciphers = r.u16_list(r.u16())
        r.take(r.u8())  # legacy_compression_methods
    except _Short:
        hello.complete = False
        hello.version = version_name(hello.legacy_version) if hello.legacy_version else ""
        return hello if hello.legacy_version else None

    def on_extension(ext_type: int, ext: bytes) -> None:
        if ext_type == EXT_SNI:
            hello.has_sni_extension = True
            if len(ext) >= 5 and ext[2] == 0:
                name_len = int.from_bytes(ext[3:5], "big")
                hello.sni = ext[5 : 5 + name_len].decode("ascii", "replace").lower().rstrip(".")
        elif ext_type == EXT_VERSIONS and ext:
            hello.supported_versions = _Reader(ext, 1).u16_list(min(ext[0], len(ext) - 1))
        elif ext_type == EXT_SIG_ALGS and len(ext) >= 2:
            hello.signature_algorithms = _Reader(ext, 2).u16_list(min(int.from_bytes(ext[:2], "big"), len(ext) - 2))
        elif ext_type == EXT_GROUPS and len(ext) >= 2:
            hello.groups = _Reader(ext, 2).u16_list(min(int.from_bytes(ext[:2], "big"), len(ext) - 2))
        elif ext_type == EXT_POINT_FORMATS and ext:
            hello.point_formats = tuple(ext[1 : 1 + ext[0]])
        elif ext_type == EXT_ALPN:
            hello.alpn = tuple(_alpn_names(ext))

    if r.left() > 0:
        hello.extensions, ext_complete = _read_extensions(r, on_extension)
        hello.complete = hello.complete and ext_complete
    hello.version = version_name(hello.max_version if hello.max_version in _VERSIONS else hello.legacy_version)
    return hello


def parse_server_hello_reference(payload: bytes) -> ServerHello | None:
    """`parse_server_hello` in Python: what the C must give (used by the tests)."""
    found = handshake_message(payload, _SERVER_HELLO)
    if found is None:
        return None
    body, complete = found
    r = _Reader(body)
    try:
        legacy_version = r.u16()
        r.take(32)
        r.take(r.u8())
        hello = ServerHello(legacy_version, r.u16(), complete=complete)
        r.u8()  # compression method
    except _Short:
        return None

    def on_extension(ext_type: int, ext: bytes) -> None:
        if ext_type == EXT_VERSIONS and len(ext) >= 2:
            hello.selected_version = int.from_bytes(ext[:2], "big")
        elif ext_type == EXT_ALPN:
            names = _alpn_names(ext)
            hello.alpn = names[0] if names else b""

    if r.left() > 0:
        hello.extensions, ext_complete = _read_extensions(r, on_extension)
        hello.complete = hello.complete and ext_complete
    return hello
