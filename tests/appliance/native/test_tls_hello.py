"""The C hello parser and fingerprint strings (appliance/native/tls_hello.h via appliance.native.dpi) against
their Python references (tls_parse.parse_*_hello_reference, tls_fingerprint.ja4*_reference,
ja3_string_reference): every field with its type, JA4, JA4S and JA3, or both None, on real hellos (the
builders of the detection tests, OpenSSL's own through memory BIOs, a captured one, the bench corpus), every cut
of them, hostile records and seeded random mutations. test_sanitized.py runs this file under ASan/UBSan."""

from __future__ import annotations

import dataclasses
import hashlib
import random
import ssl
import struct
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization

from appliance.detection.dpi import tls_meta
from appliance.detection.facts import tls_metadata
from appliance.detection.dpi.tls_fingerprint import (ja3, ja3_string, ja3_string_reference, ja4, ja4_reference, ja4s,
                                                     ja4s_reference, read_client_hello, read_server_hello)
from appliance.detection.dpi.tls_parse import (MAX_HANDSHAKE_BYTES, ClientHello, ServerHello, parse_client_hello,
                                               parse_client_hello_reference, parse_server_hello,
                                               parse_server_hello_reference)
from appliance.model import FlowRecord, Packet, Transport
from appliance.native import dpi
from tests.appliance.detection import tls_certs as tc
from tests.appliance.detection import tls_records as tr
from tests.appliance.detection.pcap import FIXTURES, read_pcap
from tests.appliance.detection.test_tls_benign import chrome, firefox

SIG_ALGS = [0x0403, 0x0804, 0x0401, 0x0503, 0x0805, 0x0501, 0x0806, 0x0601]


def _typed(value: Any) -> Any:
    """A value with the type of every part: True == 1 and (1,) == [1] must not pass for equal."""
    if isinstance(value, tuple):
        return ("tuple", tuple(_typed(v) for v in value))
    return (type(value).__name__, value)


def _fields(hello: ClientHello | ServerHello) -> Any:
    return _typed(tuple(getattr(hello, f.name) for f in dataclasses.fields(hello)))


def assert_same(payload: bytes) -> tuple[ClientHello | None, ServerHello | None]:
    """C == Python for both hellos of `payload`: fields, fingerprints, and the fingerprints of the objects."""
    want_client, got_client = parse_client_hello_reference(payload), read_client_hello(payload)
    if want_client is None:
        assert got_client is None, payload
    else:
        assert got_client is not None, payload
        hello, got_ja4, got_ja3 = got_client
        assert _fields(hello) == _fields(want_client), payload
        want_ja3 = ja3_string_reference(want_client)
        assert (got_ja4, got_ja3) == (ja4_reference(want_client), hashlib.md5(want_ja3.encode()).hexdigest()), payload
        assert (ja4(want_client, "q"), ja3_string(want_client)) == (ja4_reference(want_client, "q"), want_ja3), payload
    want_server, got_server = parse_server_hello_reference(payload), read_server_hello(payload)
    if want_server is None:
        assert got_server is None, payload
    else:
        assert got_server is not None, payload
        server, got_ja4s = got_server
        assert _fields(server) == _fields(want_server), payload
        assert got_ja4s == ja4s_reference(want_server) == ja4s(want_server), payload
    return want_client, want_server


def _ext(ext_type: int, body: bytes) -> bytes:
    return struct.pack("!HH", ext_type, len(body)) + body


def _client(exts: bytes | None = b"", *, version: bytes = b"\x03\x03", session: bytes = b"\x20" + bytes(32),
            ciphers: bytes = b"\x00\x04\x13\x01\x13\x02", compression: bytes = b"\x01\x00",
            block: bytes | None = None, record_size: int = 16384) -> bytes:
    """A ClientHello from raw parts: `block` replaces the extensions block (length included) when given."""
    tail = block if block is not None else (b"" if exts is None else struct.pack("!H", len(exts)) + exts)
    return tr.record(1, version + bytes(32) + session + ciphers + compression + tail, record_size)


def _server(exts: bytes | None = b"", *, version: bytes = b"\x03\x03", cipher: bytes = b"\x13\x01",
            block: bytes | None = None) -> bytes:
    tail = block if block is not None else (b"" if exts is None else struct.pack("!H", len(exts)) + exts)
    return tr.record(2, version + bytes(32) + b"\x00" + cipher + b"\x00" + tail)


def _sni(name: bytes, name_type: int = 0) -> bytes:
    entry = bytes([name_type]) + struct.pack("!H", len(name)) + name
    return _ext(0, struct.pack("!H", len(entry)) + entry)


def _alpn(names: list[bytes]) -> bytes:
    body = b"".join(bytes([len(n)]) + n for n in names)
    return _ext(16, struct.pack("!H", len(body)) + body)


def _openssl_handshake(tmp: Path, server_max: ssl.TLSVersion) -> tuple[bytes, bytes]:
    """OpenSSL's own ClientHello and the server's first flight, through memory BIOs (no socket)."""
    _, intermediate = tc.public_pki()
    leaf = tc.issue("www.example.com", issuer=intermediate, dns=["www.example.com"])
    cert, key = tmp / "leaf.pem", tmp / "leaf.key"
    cert.write_bytes(leaf.pem + intermediate.pem)
    key.write_bytes(leaf.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    server_ctx.maximum_version = server_max
    server_ctx.set_alpn_protocols(["h2"])
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.check_hostname, client_ctx.verify_mode = False, ssl.CERT_NONE
    client_ctx.set_alpn_protocols(["h2", "http/1.1"])
    pipes = [ssl.MemoryBIO() for _ in range(4)]
    client = client_ctx.wrap_bio(pipes[0], pipes[1], server_hostname="WWW.Example.COM.")
    server = server_ctx.wrap_bio(pipes[2], pipes[3], server_side=True)
    with pytest.raises(ssl.SSLWantReadError):
        client.do_handshake()
    hello = pipes[1].read()
    pipes[2].write(hello)
    with pytest.raises(ssl.SSLWantReadError):
        server.do_handshake()
    return hello, pipes[3].read()


def _captured_hello() -> bytes:
    """The TCP payload that opens a handshake in the suricata-verify capture (a real TLSv1 ClientHello)."""
    for _, frame in read_pcap(FIXTURES / "tls-c2-clienthello.pcap"):
        ip = frame[14:]
        if frame[12:14] == b"\x08\x00" and ip[9] == 6:
            tcp = ip[(ip[0] & 0x0F) * 4 : struct.unpack("!H", ip[2:4])[0]]
            payload = tcp[(tcp[12] >> 4) * 4 :]
            if payload[:1] == b"\x16":
                return payload
    raise AssertionError("no handshake in the capture")


@pytest.fixture(scope="module")
def real_hellos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    rng = random.Random(5)
    tmp = tmp_path_factory.mktemp("openssl")
    openssl13, server13 = _openssl_handshake(tmp, ssl.TLSVersion.TLSv1_3)
    openssl12, server12 = _openssl_handshake(tmp, ssl.TLSVersion.TLSv1_2)
    _, intermediate = tc.public_pki()
    leaf = tc.issue("www.example.com", issuer=intermediate, dns=["www.example.com"])
    return {
        "chrome": chrome("www.example.com", rng), "chrome_updated": chrome("Mail.Example.org", rng, updated=True),
        "chrome_split": tr.client_hello([0x0A0A, 0x1301, 0x1302], [0x2A2A, 0, 16, 43, 13, 10, 11], sni="www.example.com",
                                        alpn=[b"h2"], sig_algs=SIG_ALGS, versions=[0x3A3A, 0x0304], groups=[0x1D],
                                        point_formats=[0], record_size=50),
        "firefox": firefox("www.example.org", rng), "captured_tlsv1": _captured_hello(),
        "openssl": openssl13, "openssl_server13": server13, "openssl_server12_chain": server12,
        "server13": tr.server_hello(0x1301, [0x002B, 0x0033, 0x0010], selected=0x0304, alpn=b"h2"),
        "server12_flight": tr.server_flight(0xC02F, [0xFF01, 0x0017, 0x0023, 0x0010], [leaf.der, intermediate.der]),
    }


def test_the_detectors_read_hellos_in_c(real_hellos: dict[str, bytes], monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def spy(name: str) -> Any:
        real = getattr(dpi, name)

        def called(*args: Any) -> Any:
            calls.append(name)
            return real(*args)
        return called

    for name in ("sample_facts", "client_hello", "server_hello"):
        monkeypatch.setattr(dpi, name, spy(name))
    flow = FlowRecord("f", "agent", 6, Transport.TCP, 1, 40000, 2, 443, 0, 1)
    flow.samples = [Packet(0, direction, 6, Transport.TCP, 1, 2, 40000, 443, len(payload) + 52, payload)
                    for direction, payload in ((1, real_hellos["chrome"]), (2, real_hellos["server13"]))]
    meta = tls_metadata(flow)
    assert calls == ["sample_facts"]  # both directions joined and both hellos read in the one C call
    assert meta is not None and meta.client_hello is not None and meta.server_hello is not None
    assert (meta.sni, meta.alpn, meta.client_hello.version, meta.server_hello.version) == ("www.example.com", "h2", "TLSv1.3", 0x0304)
    assert meta.ja4 == ja4_reference(meta.client_hello) and meta.ja4s == ja4s_reference(meta.server_hello)
    assert meta.ja3 == hashlib.md5(ja3_string_reference(meta.client_hello).encode()).hexdigest()


def test_real_hellos_equal_the_reference(real_hellos: dict[str, bytes]) -> None:
    for name, payload in real_hellos.items():
        client, server = assert_same(payload)
        assert (client, server) != (None, None), name
        for form in (bytearray(payload), memoryview(payload)):
            assert dpi.client_hello(form) == dpi.client_hello(payload)
            assert dpi.server_hello(form) == dpi.server_hello(payload)
    openssl = parse_client_hello(real_hellos["openssl"])
    assert openssl is not None and openssl.sni == "www.example.com" and openssl.complete
    captured = parse_client_hello(real_hellos["captured_tlsv1"])
    assert captured is not None and captured.version == "TLSv1.0"


def test_every_cut_of_real_hellos_equals_the_reference(real_hellos: dict[str, bytes]) -> None:
    for name in ("chrome", "chrome_split", "openssl", "captured_tlsv1", "openssl_server13", "server12_flight"):
        payload = real_hellos[name]
        for end in range(len(payload) + 1):
            assert_same(payload[:end])


def test_the_test_builders_hellos_equal_the_reference() -> None:
    rng = random.Random(11)
    for n in range(300):
        ciphers = [rng.randrange(0x10000) for _ in range(rng.randrange(0, 40))]
        extensions = rng.sample([0, 5, 10, 11, 13, 16, 23, 43, 45, 51, 0xFF01, 0x0A0A, 0xFAFA, 0x4469], rng.randrange(0, 14))
        payload = tr.client_hello(
            ciphers, extensions, sni=rng.choice(["a.example", "B.EXAMPLE.", "x" * 200, ""]),
            alpn=[rng.randbytes(rng.randrange(0, 12)) for _ in range(rng.randrange(0, 5))],
            sig_algs=[rng.randrange(0x10000) for _ in range(rng.randrange(0, 12))],
            versions=rng.sample([0x0304, 0x0303, 0x0302, 0x0301, 0x0300, 0x7F1C, 0x1A1A], rng.randrange(0, 5)),
            groups=[rng.randrange(0x10000) for _ in range(rng.randrange(0, 8))],
            point_formats=[rng.randrange(256) for _ in range(rng.randrange(0, 4))],
            legacy_version=rng.choice([0x0300, 0x0301, 0x0302, 0x0303, 0x0304, 0x0002, 0xFEFD, 0x1234]),
            record_size=rng.choice([16384, 16384, 1, 7, 100]))
        client, _ = assert_same(payload)
        assert client is not None and client.complete, n
        server = tr.server_hello(rng.randrange(0x10000), extensions, version=rng.choice([0x0303, 0x0301, 0xFEFD]),
                                 selected=rng.choice([0, 0x0304, 0x0A0A]), alpn=rng.randbytes(rng.randrange(0, 6)))
        assert assert_same(server)[1] is not None


HOSTILE = {
    "empty": b"",
    "other_record_type": b"\x17" + _client()[1:],
    "ssl2_record_version": b"\x16\x02" + _client()[2:],
    "any_minor_version": b"\x16\x03\x09" + _client()[3:],
    "alert_then_hello": b"\x15\x03\x03\x00\x02\x02\x28" + _client(),
    "hello_then_ccs_then_more": _client(record_size=60)[:65] + b"\x14\x03\x03\x00\x01\x01" + _client()[65:],
    "record_longer_than_payload": b"\x16\x03\x01\xff\xff" + _client()[5:],
    "zero_length_records": b"\x16\x03\x01\x00\x00" * 3 + _client(),
    "only_a_header": b"\x16\x03\x01\x00\x04\x01\x00\x00\x00",
    "message_of_16_mb": b"\x16\x03\x01\x40\x00\x01\xff\xff\xff\x03\x03" + bytes(70_000),
    "many_one_byte_records": _client(_sni(b"example.com") + _alpn([b"h2"]), record_size=1),
    "past_max_handshake_bytes": _client(_ext(21, bytes(MAX_HANDSHAKE_BYTES)) + _sni(b"late.example"), record_size=4000),
    "wrong_message_type": tr.record(4, bytes(50)),
    "legacy_version_zero": _client(version=b"\x00\x00"),
    "legacy_version_zero_cut": _client(version=b"\x00\x00")[:50],
    "unknown_legacy_version": _client(version=b"\x7f\x1c"),
    "session_id_past_end": _client(session=b"\xff" + bytes(10), ciphers=b"", compression=b"", exts=None),
    "cipher_list_past_end": _client(ciphers=b"\xff\xff\x13\x01", compression=b"", exts=None),
    "cipher_list_65535": _client(ciphers=b"\xff\xff" + bytes(range(256)) * 64, compression=b"", exts=None),
    "cipher_list_empty": _client(ciphers=b"\x00\x00"),
    "cipher_list_odd": _client(ciphers=b"\x00\x03\x13\x01\x13"),
    "cipher_list_one_byte": _client(ciphers=b"\x00\x01\x13"),
    "compression_past_end": _client(compression=b"\x05\x00", exts=None),
    "no_extensions_block": _client(exts=None),
    "zero_extensions": _client(b""),
    "extensions_block_one_byte": _client(block=b"\x00"),
    "extensions_block_past_end": _client(block=b"\x01\x00" + _sni(b"a.example")),
    "extensions_block_shorter": _client(block=b"\x00\x05" + _sni(b"a.example") + _alpn([b"h2"])),
    "extension_past_block_inside_message": _client(block=b"\x00\x06" + _sni(b"a.example")),
    "extension_past_end": _client(block=b"\x00\x08\x00\x10\xff\xff\x00\x03\x02h2"),
    "extension_trailing_bytes": _client(_sni(b"a.example") + b"\x00\x01\x00"),
    "extensions_all_empty": _client(b"".join(_ext(t, b"") for t in (0, 10, 11, 13, 16, 43, 0x0A0A))),
    "extensions_one_byte": _client(b"".join(_ext(t, b"\x05") for t in (0, 10, 11, 13, 16, 43))),
    "extensions_4095": _client(_ext(0xFAFA, b"") * 4000 + _ext(0, b"") * 95),
    "duplicate_extensions": _client(_sni(b"first.example") + _alpn([b"h2"]) + _ext(43, b"\x02\x03\x04")
                                    + _ext(11, b"\x01\x00") + _sni(b"second.example") + _ext(16, b"")
                                    + _ext(43, b"") + _ext(11, b"\x02\x01\x02") + _sni(b"x", 1)),
    "sni_uppercase_dots_non_ascii": _client(_sni(b"WWW.Ex\xc3\xa9mple.COM..")),
    "sni_only_dots": _client(_sni(b"...")),
    "sni_non_ascii_last": _client(_sni(b"a.\x80.")),
    "sni_control_bytes": _client(_sni(b"a\x00b\x7f.\x1b")),
    "sni_other_name_type": _client(_sni(b"example.com", name_type=7)),
    "sni_name_past_end": _client(_ext(0, b"\x00\x0e\x00\xff\xffexample.com")),
    "sni_short_body": _client(_ext(0, b"\x00\x03\x00\x00")),
    "sni_empty_name": _client(_sni(b"")),
    "alpn_zero_length_names": _client(_alpn([b"", b"h2", b""])),
    "alpn_first_empty_then_h2": _client(_alpn([b"", b"h2"])),
    "alpn_40_names": _client(_alpn([b"p%d" % i for i in range(40)])),
    "alpn_name_past_end": _client(_ext(16, b"\x00\x05\x02h2\x09http")),
    "alpn_declared_65535": _client(_ext(16, b"\xff\xff\x02h2\x08http/1.1")),
    "alpn_body_one_byte": _client(_ext(16, b"\x00")),
    "alpn_non_alnum": _client(_alpn([b"\xab\xcd"])),
    "alpn_one_byte_name": _client(_alpn([b"x"])),
    "versions_odd_length": _client(_ext(43, b"\x05\x03\x04\x03\x03\x03")),
    "versions_declared_255": _client(_ext(43, b"\xff\x03\x04\x0a\x0a")),
    "versions_only_grease": _client(_ext(43, b"\x04\x0a\x0a\x1a\x1a")),
    "versions_unknown_highest": _client(_ext(43, b"\x04\x7f\x1c\x03\x04")),
    "sig_algs_declared_65535": _client(_ext(13, b"\xff\xff" + bytes(range(40)))),
    "sig_algs_odd": _client(_ext(13, b"\x00\x03\x04\x03\x08")),
    "groups_declared_65535": _client(_ext(10, b"\xff\xff" + b"\x00\x1d" * 3000)),
    "groups_one_byte_body": _client(_ext(10, b"\x00")),
    "point_formats_past_end": _client(_ext(11, b"\xff\x00\x01\x02")),
    "point_formats_255": _client(_ext(11, b"\xff" + bytes(range(255)))),
    "point_formats_many_duplicates": _client(_ext(11, b"\xff" + bytes(255)) * 60),
    "grease_everywhere": _client(_ext(0x0A0A, b"") + _ext(13, b"\x00\x04\x0a\x0a\x04\x03") + _ext(10, b"\x00\x02\xfa\xfa"),
                                 ciphers=b"\x00\x04\x0a\x0a\x2a\x2a"),
    "only_sni_and_alpn": _client(_sni(b"a.example") + _alpn([b"h2"])),
    "server_cut_after_compression": _server()[:47],
    "server_cut_before_compression": _server()[:46],
    "server_cut_in_cipher": _server()[:45],
    "server_no_extensions": _server(None),
    "server_zero_legacy": _server(version=b"\x00\x00"),
    "server_version_one_byte": _server(_ext(43, b"\x03")),
    "server_version_grease_extension": _server(_ext(0x1A1A, b"") + _ext(43, b"\x03\x04")),
    "server_alpn_empty_name": _server(_ext(16, b"\x00\x01\x00")),
    "server_alpn_empty": _server(_ext(16, b"")),
    "server_alpn_two": _server(_alpn([b"\x01\xff", b"h2"])),
    "server_extensions_past_end": _server(block=b"\x00\x20" + _ext(43, b"\x03\x04")),
    "server_duplicate_versions": _server(_ext(43, b"\x03\x04") + _ext(43, b"\x03")),
    "server_unknown_version": _server(_ext(43, b"\x7f\x1c")),
    "server_dtls": _server(version=b"\xfe\xfd"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_records_equal_the_reference(name: str) -> None:
    assert_same(HOSTILE[name])


def test_hostile_cases_reach_what_they_name() -> None:
    """A few of the cases above, checked for what they were built to reach (so a builder slip cannot hide)."""
    sni = parse_client_hello(HOSTILE["sni_uppercase_dots_non_ascii"])
    assert sni is not None and sni.sni == "www.ex\ufffd\ufffdmple.com"
    assert parse_client_hello(HOSTILE["sni_only_dots"]).sni == ""  # type: ignore[union-attr]
    assert len(parse_client_hello(HOSTILE["alpn_40_names"]).alpn) == 32  # type: ignore[union-attr]
    assert parse_client_hello(HOSTILE["alpn_zero_length_names"]).alpn == (b"", b"h2", b"")  # type: ignore[union-attr]
    dup = parse_client_hello(HOSTILE["duplicate_extensions"])
    assert dup is not None and (dup.sni, dup.alpn, dup.supported_versions, dup.point_formats) == ("second.example", (), (0x0304,), (1, 2))
    big = parse_client_hello(HOSTILE["cipher_list_65535"])
    assert big is not None and not big.complete and big.ciphers == ()
    groups = parse_client_hello(HOSTILE["groups_declared_65535"])
    assert groups is not None and len(groups.groups) == 3000 and len(ja3_string(groups)) > 4096  # the heap path
    assert parse_client_hello(HOSTILE["legacy_version_zero_cut"]) is None
    assert parse_client_hello(HOSTILE["unknown_legacy_version"]).version == "0x7f1c"  # type: ignore[union-attr]
    assert parse_client_hello(HOSTILE["other_record_type"]) is None
    late = parse_client_hello(HOSTILE["past_max_handshake_bytes"])
    assert late is not None and not late.complete and not late.has_sni_extension


def _mutate(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(6)
        at = rng.randrange(len(out) + 1)
        if op == 0 and out:
            out[min(at, len(out) - 1)] = rng.randrange(256)
        elif op == 1 and len(out) > 1:  # a length field set to something interesting
            out[min(at, len(out) - 2) : min(at, len(out) - 2) + 2] = rng.choice([0, 1, 2, 3, 0xFF, 0x100, 0xFFFF]).to_bytes(2, "big")
        elif op == 2:
            del out[at : at + rng.randint(1, 40)]
        elif op == 3:
            out[at:at] = out[max(0, at - rng.randint(1, 40)) : at]
        elif op == 4:
            out[at:at] = rng.randbytes(rng.randint(1, 8))
        else:
            del out[at:]
    if rng.random() < 0.2 and len(out) > 5:
        out[5] = rng.choice([1, 2])  # the other hello type: the server parser meets client bytes and back
    return bytes(out)


def test_seeded_mutations_of_real_hellos_equal_the_reference(real_hellos: dict[str, bytes]) -> None:
    rng = random.Random(2026)
    bases = list(real_hellos.values()) + [HOSTILE["duplicate_extensions"], HOSTILE["alpn_40_names"]]
    found = 0
    for _ in range(4000):
        client, server = assert_same(_mutate(rng, rng.choice(bases)))
        found += client is not None or server is not None
    assert found > 1000  # the mutations still reach the hello parsers, not only the record check


def test_the_corpus_hellos_equal_the_reference() -> None:
    from bench.pipeline_bench import corpus, finished_flows

    payloads = {tls_meta._joined(flow.samples, direction) for flow in finished_flows(corpus())
                for direction in (1, 2) if tls_meta.opens_handshake(flow)}
    assert len(payloads) > 20
    read = 0
    for payload in payloads:
        client, server = assert_same(payload)
        read += client is not None or server is not None
    assert read > 20


def test_objects_with_values_no_parser_gives_are_refused(real_hellos: dict[str, bytes]) -> None:
    hello = parse_client_hello(real_hellos["chrome"])
    server = parse_server_hello(real_hellos["server13"])
    assert hello is not None and server is not None
    for field, value, error in (("ciphers", (0x10000,), ValueError), ("groups", (-1,), ValueError),
                                ("extensions", ("a",), TypeError), ("point_formats", 3, TypeError),
                                ("legacy_version", 1 << 70, OverflowError), ("alpn", ("h2",), TypeError),
                                ("alpn", 5, TypeError)):
        wrong_client = dataclasses.replace(hello)
        setattr(wrong_client, field, value)
        with pytest.raises(error):
            dpi.client_hello_texts(wrong_client)
    for server_field, bad_value in (("cipher", 0x10000), ("selected_version", -1), ("alpn", "h2"), ("extensions", None)):
        wrong_server = dataclasses.replace(server)
        setattr(wrong_server, server_field, bad_value)
        with pytest.raises((ValueError, TypeError)):
            dpi.server_hello_texts(wrong_server)
    for wrong in (None, 3, "text", memoryview(real_hellos["chrome"])[::2]):
        with pytest.raises((TypeError, BufferError, ValueError)):
            dpi.client_hello(wrong)
        with pytest.raises((TypeError, BufferError, ValueError)):
            dpi.server_hello(wrong)
    with pytest.raises(AttributeError):
        dpi.client_hello_texts(object())
    ciphers: list[Any] = [0x1301] * 50

    class Shrinking:
        def __index__(self) -> int:  # would empty the list the C is walking
            ciphers.clear()
            return 1

    ciphers[1] = Shrinking()
    sneaky = dataclasses.replace(hello)
    sneaky.ciphers = ciphers  # type: ignore[assignment]
    with pytest.raises(TypeError):
        dpi.client_hello_texts(sneaky)
    assert len(ciphers) == 50
    edited = dataclasses.replace(hello, signature_algorithms=[0x0403], ciphers=list(hello.ciphers))  # type: ignore[arg-type]  # lists too
    assert ja4(edited) == ja4_reference(edited) and ja3(edited) == hashlib.md5(ja3_string_reference(edited).encode()).hexdigest()


def test_no_leak_and_buffers_released(real_hellos: dict[str, bytes]) -> None:
    client, server = bytearray(real_hellos["chrome"]), bytearray(real_hellos["server13"])
    hello, reply = parse_client_hello(bytes(client)), parse_server_hello(bytes(server))
    assert hello is not None and reply is not None
    bad = dataclasses.replace(hello, alpn=(b"h2", 3), groups=(1, 2, 1 << 20))  # type: ignore[arg-type]

    def calls() -> None:
        dpi.client_hello(client), dpi.server_hello(server), dpi.client_hello(server), dpi.server_hello(b"\x16")
        dpi.client_hello_texts(hello), dpi.server_hello_texts(reply)
        try:  # the error path frees what it took (pytest.raises keeps tracebacks alive: not used here)
            dpi.client_hello_texts(bad)
        except ValueError:
            pass
        else:
            raise AssertionError("a group of 2**20 was taken")

    for _ in range(100):
        calls()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(5000):
            calls()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 8192, grown
    client.extend(b"more")  # a buffer still exported would refuse the resize (BufferError)
    server.extend(b"more")
