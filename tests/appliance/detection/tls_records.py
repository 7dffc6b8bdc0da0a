"""TLS record builders for parser tests: a hello from explicit lists, so published vectors can be fed in."""

from __future__ import annotations

import struct


def _ext(ext_type: int, body: bytes) -> bytes:
    return struct.pack("!HH", ext_type, len(body)) + body


def _u16s(values: list[int]) -> bytes:
    return b"".join(struct.pack("!H", v) for v in values)


def record(handshake_type: int, body: bytes, record_size: int = 16384) -> bytes:
    """One handshake message in as many TLS records as `record_size` asks for."""
    message = bytes([handshake_type]) + len(body).to_bytes(3, "big") + body
    out = b""
    for i in range(0, len(message), record_size):
        chunk = message[i : i + record_size]
        out += b"\x16\x03\x01" + struct.pack("!H", len(chunk)) + chunk
    return out


def client_hello(ciphers: list[int], extensions: list[int], *, sni: str = "example.com", alpn: list[bytes] = (),
                 sig_algs: list[int] = (), versions: list[int] = (), groups: list[int] = (),
                 point_formats: list[int] = (), legacy_version: int = 0x0303, record_size: int = 16384) -> bytes:
    """A ClientHello whose extensions appear in the order of `extensions`, with bodies for the ones parsed."""
    bodies = []
    for ext_type in extensions:
        if ext_type == 0:
            name = sni.encode()
            entry = b"\x00" + struct.pack("!H", len(name)) + name
            body = struct.pack("!H", len(entry)) + entry
        elif ext_type == 16:
            names = b"".join(bytes([len(a)]) + a for a in alpn)
            body = struct.pack("!H", len(names)) + names
        elif ext_type == 13:
            body = struct.pack("!H", 2 * len(sig_algs)) + _u16s(list(sig_algs))
        elif ext_type == 43:
            body = bytes([2 * len(versions)]) + _u16s(list(versions))
        elif ext_type == 10:
            body = struct.pack("!H", 2 * len(groups)) + _u16s(list(groups))
        elif ext_type == 11:
            body = bytes([len(point_formats)]) + bytes(point_formats)
        else:
            body = b""
        bodies.append(_ext(ext_type, body))
    exts = b"".join(bodies)
    body = (struct.pack("!H", legacy_version) + bytes(32) + b"\x20" + bytes(32) + struct.pack("!H", 2 * len(ciphers))
            + _u16s(ciphers) + b"\x01\x00" + (struct.pack("!H", len(exts)) + exts if extensions else b""))
    return record(1, body, record_size)


def server_hello(cipher: int, extensions: list[int], *, version: int = 0x0303, selected: int = 0, alpn: bytes = b"") -> bytes:
    bodies = []
    for ext_type in extensions:
        if ext_type == 43:
            bodies.append(_ext(43, struct.pack("!H", selected)))
        elif ext_type == 16:
            entry = bytes([len(alpn)]) + alpn
            bodies.append(_ext(16, struct.pack("!H", len(entry)) + entry))
        else:
            bodies.append(_ext(ext_type, b""))
    exts = b"".join(bodies)
    body = struct.pack("!H", version) + bytes(32) + b"\x00" + struct.pack("!H", cipher) + b"\x00"
    body += struct.pack("!H", len(exts)) + exts
    return record(2, body)


def server_flight(cipher: int, extensions: list[int], chain: list[bytes], *, version: int = 0x0303) -> bytes:
    """A TLS 1.2 server's first flight: ServerHello, Certificate (DER chain, leaf first), ServerHelloDone."""
    hello = server_hello(cipher, extensions, version=version)
    entries = b"".join(len(der).to_bytes(3, "big") + der for der in chain)
    certificate = record(11, len(entries).to_bytes(3, "big") + entries)
    return hello + certificate + record(14, b"")
