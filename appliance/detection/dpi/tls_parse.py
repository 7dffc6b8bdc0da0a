"""TLS ClientHello parsing: record version, handshake version, SNI (RFC 8446 4.1.2, RFC 6066 3)."""

from __future__ import annotations

from dataclasses import dataclass

_VERSIONS = {0x0300: "SSLv3", 0x0301: "TLSv1.0", 0x0302: "TLSv1.1", 0x0303: "TLSv1.2", 0x0304: "TLSv1.3"}


@dataclass(slots=True)
class ClientHello:
    version: str  # the highest version offered (supported_versions when present)
    sni: str  # "" when the hello carries no server_name


def version_name(value: int) -> str:
    return _VERSIONS.get(value, f"0x{value:04x}")


def parse_client_hello(payload: bytes) -> ClientHello | None:
    """The ClientHello in the first TLS record of `payload`; None when it is not one."""
    try:
        if len(payload) < 9 or payload[0] != 0x16 or payload[5] != 0x01:
            return None
        version = int.from_bytes(payload[9:11], "big")
        pos = 11 + 32  # client version + random
        sid_len = payload[pos]
        pos += 1 + sid_len
        cs_len = int.from_bytes(payload[pos : pos + 2], "big")
        pos += 2 + cs_len
        comp_len = payload[pos]
        pos += 1 + comp_len
        sni = ""
        if pos + 2 <= len(payload):
            ext_end = min(len(payload), pos + 2 + int.from_bytes(payload[pos : pos + 2], "big"))
            pos += 2
            while pos + 4 <= ext_end:
                ext_type = int.from_bytes(payload[pos : pos + 2], "big")
                ext_len = int.from_bytes(payload[pos + 2 : pos + 4], "big")
                body = payload[pos + 4 : pos + 4 + ext_len]
                if ext_type == 0 and len(body) >= 5 and body[2] == 0:
                    name_len = int.from_bytes(body[3:5], "big")
                    sni = body[5 : 5 + name_len].decode("ascii", "replace").lower().rstrip(".")
                elif ext_type == 43 and len(body) >= 3:
                    offered = [int.from_bytes(body[i : i + 2], "big") for i in range(1, 1 + body[0], 2)]
                    real = [v for v in offered if v in _VERSIONS]
                    if real:
                        version = max(real)
                pos += 4 + ext_len
        return ClientHello(version_name(version), sni)
    except IndexError:
        return None
