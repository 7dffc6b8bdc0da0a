"""TLS fingerprints: JA4 and JA4S (FoxIO, technical_details/JA4.md and JA4S.md) and JA3 (Salesforce).

Pure functions of a parsed hello. JA4 is the current reference (sorted lists, so extension-order
randomisation in browsers does not change it); JA3 is kept for compatibility with older threat
intelligence. GREASE values (RFC 8701) are ignored everywhere.

The strings the fingerprints hash are built in C (appliance/native/tls_hello.h), in the same call that reads
the hello for `read_client_hello`/`read_server_hello`; hashing stays with hashlib, behind `FingerprintMemo` on
the analysis path. `ja4_reference`, `ja4s_reference` and `ja3_string_reference` are the Python the C equals
(tests/appliance/native/test_tls_hello.py).
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable

from appliance.detection.dpi.tls_parse import EXT_ALPN, EXT_SNI, ClientHello, ServerHello, is_grease
from appliance.native import dpi as native_dpi

_JA4_VERSIONS = {0x0304: "13", 0x0303: "12", 0x0302: "11", 0x0301: "10", 0x0300: "s3", 0x0002: "s2",
                 0xFEFF: "d1", 0xFEFD: "d2", 0xFEFC: "d3"}
_EMPTY = "000000000000"


def _sha12(text: str) -> str:
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:12]


def _alnum(byte: int) -> bool:
    return 0x30 <= byte <= 0x39 or 0x41 <= byte <= 0x5A or 0x61 <= byte <= 0x7A


def alpn_code(first: bytes | None) -> str:
    """Two characters for the first ALPN value: its first and last byte, or hex nibbles when not alphanumeric."""
    if not first:
        return "00"
    if _alnum(first[0]) and _alnum(first[-1]):
        return chr(first[0]) + chr(first[-1])
    text = first.hex()
    return text[0] + text[-1]


def _hex_list(values: list[int]) -> str:
    """'002f,0035,1301': four hex digits per value, comma-separated (one format call: a third of a join)."""
    return ("%04x," * len(values) % tuple(values))[:-1]


def _count(n: int) -> str:
    return f"{min(n, 99):02d}"


def _ja4_of(texts: tuple[str, str, str, str], transport: str) -> str:
    head, ciphers, extensions, _ = texts
    return f"{transport}{head}_{_sha12(ciphers) if ciphers else _EMPTY}_{_sha12(extensions) if extensions else _EMPTY}"


def _ja3_of(text: str) -> str:
    return hashlib.md5(text.encode("ascii"), usedforsecurity=False).hexdigest()


def _ja4s_of(texts: tuple[str, str], transport: str) -> str:
    head, extensions = texts
    return f"{transport}{head}_{_sha12(extensions) if extensions else _EMPTY}"


def ja4(hello: ClientHello, transport: str = "t") -> str:
    """JA4 of a ClientHello, e.g. t13d1516h2_8daaf6152771_e5627efa2ab1."""
    return _ja4_of(native_dpi.client_hello_texts(hello), transport)


def ja4s(hello: ServerHello, transport: str = "t") -> str:
    """JA4S of a ServerHello, e.g. t120400_c030_4e8089b08790."""
    return _ja4s_of(native_dpi.server_hello_texts(hello), transport)


def ja3_string(hello: ClientHello) -> str:
    """SSLVersion,Ciphers,Extensions,EllipticCurves,EcPointFormats (decimal, dash-joined, GREASE removed)."""
    return native_dpi.client_hello_texts(hello)[3]


def ja3(hello: ClientHello) -> str:
    """JA3: the MD5 of `ja3_string` (an identifier, not a security use of MD5)."""
    return _ja3_of(ja3_string(hello))


def read_client_hello(payload: bytes, transport: str = "t") -> tuple[ClientHello, str, str] | None:
    """The ClientHello at the start of `payload` with its JA4 and JA3, in one C call; None when it is not one."""
    found = native_dpi.client_hello(payload)
    if found is None:
        return None
    fields, texts = found
    return ClientHello(*fields), _ja4_of(texts, transport), _ja3_of(texts[3])


def read_server_hello(payload: bytes, transport: str = "t") -> tuple[ServerHello, str] | None:
    """The ServerHello at the start of `payload` with its JA4S, in one C call; None when it is not one."""
    found = native_dpi.server_hello(payload)
    if found is None:
        return None
    fields, texts = found
    return ServerHello(*fields), _ja4s_of(texts, transport)


class _Remembered(dict[str, Any]):
    """A dict that computes a missing key's value with `compute` and keeps it while it holds fewer than
    `entries` keys of at most `max_key` characters (a longer key is computed each time, never kept); a full
    one starts over. A hit is a plain dict lookup (no Python call): it is made for every TLS flow."""

    def __init__(self, compute: Callable[[str], Any], entries: int, max_key: int) -> None:
        super().__init__()
        self._compute = compute
        self._entries = entries
        self._max_key = max_key

    def __missing__(self, key: str) -> Any:
        value = self._compute(key)
        if len(key) <= self._max_key:
            if len(self) >= self._entries:
                self.clear()
            self[key] = value
        return value


def _ja4_print(key: str) -> str:
    head, ciphers, extensions = key.split("|")
    return _ja4_of((head, ciphers, extensions, ""), "t")


def _ja4s_print(key: str) -> str:
    head, extensions = key.split("|")
    return _ja4s_of((head, extensions), "t")


class FingerprintMemo:
    """JA4 (`ja4[key]`), JA3 (`ja3[ja3 string]`) and JA4S (`ja4s[key]`), transport "t", from the texts they
    hash as `native_dpi.sample_facts` gives them ("head|ciphers|extensions", "head|extensions": "|" between
    the texts), remembered.

    Hashing (three SHA-256 and an MD5 per TLS flow) cost more than reading the hellos, and the texts repeat
    flow after flow: JA4's and JA4S's are a function of the client software and of the server's configuration,
    not of the connection (random, session id, SNI, GREASE values and extension order are not in them). JA3's
    string keeps the extensions in wire order: stable for most software, new on every hello of a browser that
    permutes them (Chrome), so it has its own memo. Keys are attacker-chosen: plain dicts (str hashing is
    keyed SipHash), at most `entries` keys each of at most `max_key` characters; a full one starts over."""

    def __init__(self, entries: int = 1024, max_key: int = 2048) -> None:
        self.ja4: dict[str, str] = _Remembered(_ja4_print, entries, max_key)
        self.ja3: dict[str, str] = _Remembered(_ja3_of, entries, max_key)
        self.ja4s: dict[str, str] = _Remembered(_ja4s_print, entries, max_key)


def ja4_reference(hello: ClientHello, transport: str = "t") -> str:
    """`ja4` in Python: what the C must give (used by the tests)."""
    ciphers = [c for c in hello.ciphers if not is_grease(c)]
    extensions = [e for e in hello.extensions if not is_grease(e)]
    version = _JA4_VERSIONS.get(hello.max_version, "00")
    sni = "d" if EXT_SNI in extensions else "i"
    prefix = f"{transport}{version}{sni}{_count(len(ciphers))}{_count(len(extensions))}" \
             f"{alpn_code(hello.alpn[0] if hello.alpn else None)}"
    cipher_hash = _sha12(_hex_list(sorted(ciphers))) if ciphers else _EMPTY
    hashed = sorted(e for e in extensions if e not in (EXT_SNI, EXT_ALPN))
    algorithms = [a for a in hello.signature_algorithms if not is_grease(a)]
    text = _hex_list(hashed)
    if algorithms:
        text += "_" + _hex_list(algorithms)
    extension_hash = _sha12(text) if hashed else _EMPTY
    return f"{prefix}_{cipher_hash}_{extension_hash}"


def ja4s_reference(hello: ServerHello, transport: str = "t") -> str:
    """`ja4s` in Python: what the C must give (used by the tests)."""
    extensions = [e for e in hello.extensions if not is_grease(e)]
    version = _JA4_VERSIONS.get(hello.version, "00")
    prefix = f"{transport}{version}{_count(len(extensions))}{alpn_code(hello.alpn)}"
    extension_hash = _sha12(_hex_list(extensions)) if extensions else _EMPTY
    return f"{prefix}_{hello.cipher:04x}_{extension_hash}"


def ja3_reference(hello: ClientHello) -> str:
    """`ja3` in Python: what the C path must give (used by the tests)."""
    return _ja3_of(ja3_string_reference(hello))


def ja3_string_reference(hello: ClientHello) -> str:
    """`ja3_string` in Python: what the C must give (used by the tests)."""
    def join(values: list[int]) -> str:
        return "-".join([str(v) for v in values if not is_grease(v)])
    return ",".join((str(hello.legacy_version), join(hello.ciphers), join(hello.extensions), join(hello.groups),
                     "-".join(map(str, hello.point_formats))))

