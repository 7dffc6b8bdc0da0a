"""JA4, JA4S and JA3 against the published examples of their specifications, and the hello parser
against split, cut and hostile records."""

from __future__ import annotations

import os
import random

import pytest

from appliance.detection.dpi.tls_fingerprint import alpn_code, ja3, ja3_string, ja4, ja4s
from appliance.detection.dpi.tls_parse import parse_client_hello, parse_server_hello
from tests.appliance.detection import tls_records as tr

# FoxIO technical_details/JA4.md, "Raw Output": the example hello in its original order (JA4_ro), with
# GREASE values added where Chrome puts them (they must not count).
CHROME_CIPHERS = [0x1301, 0x1302, 0x1303, 0xC02B, 0xC02F, 0xC02C, 0xC030, 0xCCA9, 0xCCA8, 0xC013, 0xC014,
                  0x009C, 0x009D, 0x002F, 0x0035]
CHROME_EXTENSIONS = [0x001B, 0x0000, 0x0033, 0x0010, 0x4469, 0x0017, 0x002D, 0x000D, 0x0005, 0x0023, 0x0012,
                     0x002B, 0xFF01, 0x000B, 0x000A, 0x0015]
CHROME_SIG_ALGS = [0x0403, 0x0804, 0x0401, 0x0503, 0x0805, 0x0501, 0x0806, 0x0601]


def _chrome(**overrides: object) -> bytes:
    args: dict = dict(sni="www.example.com", alpn=[b"h2", b"http/1.1"], sig_algs=CHROME_SIG_ALGS,
                      versions=[0x3A3A, 0x0304, 0x0303], groups=[0x2A2A, 0x001D, 0x0017, 0x0018], point_formats=[0])
    args.update(overrides)
    return tr.client_hello([0x0A0A] + CHROME_CIPHERS, [0x5A5A] + CHROME_EXTENSIONS + [0xFAFA], **args)


def test_ja4_of_the_published_example():
    hello = parse_client_hello(_chrome())
    assert hello is not None and hello.complete
    assert ja4(hello) == "t13d1516h2_8daaf6152771_e5627efa2ab1"
    assert hello.sni == "www.example.com" and hello.alpn[0] == b"h2" and hello.version == "TLSv1.3"


def test_ja4_without_signature_algorithms_hashes_the_extensions_alone():
    extensions = [e for e in CHROME_EXTENSIONS if e != 0x000D] + [0x000D]  # keep the count, drop the algorithms
    hello = parse_client_hello(tr.client_hello(CHROME_CIPHERS, extensions, alpn=[b"h2"], versions=[0x0304]))
    assert hello is not None
    hello.signature_algorithms = ()
    assert ja4(hello).endswith("_6d807ffa2a79")  # the spec's value for the list without algorithms


def test_ja4_is_the_same_whatever_the_extension_order():
    shuffled = list(CHROME_EXTENSIONS)
    random.Random(3).shuffle(shuffled)
    a = parse_client_hello(_chrome())
    b = parse_client_hello(tr.client_hello(CHROME_CIPHERS, shuffled, sni="www.example.com", alpn=[b"h2"],
                                           sig_algs=CHROME_SIG_ALGS, versions=[0x0304]))
    assert a is not None and b is not None and ja4(a) == ja4(b)


@pytest.mark.parametrize(("value", "code"), [
    (None, "00"), (b"", "00"), (b"h2", "h2"), (b"http/1.1", "h1"), (b"x", "xx"),
    (b"\xab", "ab"), (b"\xab\xcd", "ad"), (b"\x30\xab", "3b"), (b"\x30\x31\xab\xcd", "3d"), (b"\x30\xab\xcd\x31", "01"),
])
def test_alpn_characters_follow_the_spec_examples(value, code):
    assert alpn_code(value) == code


def test_no_sni_no_alpn_and_no_ciphers():
    hello = parse_client_hello(tr.client_hello([], [0x000A], groups=[0x001D], legacy_version=0x0301))
    assert hello is not None
    assert ja4(hello) == "t10i000100_000000000000_" + __import__("hashlib").sha256(b"000a").hexdigest()[:12]


def test_ja4s_of_the_published_example():
    hello = parse_server_hello(tr.server_hello(0xC030, [0x0005, 0x0017, 0xFF01, 0x0000]))
    assert hello is not None
    assert ja4s(hello) == "t120400_c030_4e8089b08790"


def test_ja4s_of_tls13_reads_the_selected_version_and_alpn():
    hello = parse_server_hello(tr.server_hello(0x1301, [0x002B, 0x0033, 0x0010], selected=0x0304, alpn=b"h2"))
    assert hello is not None and ja4s(hello).startswith("t1303h2_1301_")


def test_ja3_of_the_published_example():
    hello = parse_client_hello(tr.client_hello(
        [47, 53, 5, 10, 49161, 49162, 49171, 49172, 50, 56, 19, 4], [0, 10, 11], groups=[23, 24, 25],
        point_formats=[0], legacy_version=769))
    assert hello is not None
    assert ja3_string(hello) == "769,47-53-5-10-49161-49162-49171-49172-50-56-19-4,0-10-11,23-24-25,0"
    assert ja3(hello) == "ada70206e40642a3e4461f35503241d5"


def test_a_hello_split_over_several_records_is_joined():
    whole = parse_client_hello(_chrome())
    split = parse_client_hello(_chrome(record_size=100))
    assert whole is not None and split is not None and split.complete
    assert ja4(split) == ja4(whole)


def test_a_hello_cut_by_the_sample_size_is_read_as_far_as_it_goes():
    payload = _chrome()
    cut = parse_client_hello(payload[: len(payload) - 30])
    assert cut is not None and not cut.complete
    assert cut.sni == "www.example.com" and len(cut.ciphers) == 16


def test_hostile_records_never_raise():
    rng = random.Random(17)
    good = _chrome()
    for _ in range(3000):
        data = bytearray(good)
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        data = bytes(data[: rng.randint(0, len(data))])
        hello = parse_client_hello(data)
        if hello is not None:
            ja4(hello), ja3(hello)
        server = parse_server_hello(b"\x16\x03\x03" + data[3:])
        if server is not None:
            ja4s(server)
    for _ in range(200):
        parse_client_hello(b"\x16\x03\x01" + os.urandom(rng.randint(0, 300)))


def test_a_hello_announcing_16_mb_reads_at_most_16_kb():
    huge = b"\x16\x03\x01\x40\x00\x01\xff\xff\xff\x03\x03" + bytes(70_000)
    hello = parse_client_hello(huge)
    assert hello is not None and not hello.complete


def _flow(payload: bytes):  # noqa: ANN202
    from appliance.model import FlowRecord, Packet, Transport

    flow = FlowRecord("f", "agent", 6, Transport.TCP, 1, 40000, 2, 443, 0, 1)
    flow.samples = [Packet(0, 1, 6, Transport.TCP, 1, 2, 40000, 443, len(payload) + 52, payload)]
    return flow


def test_the_fingerprint_memo_gives_the_published_fingerprints_and_hashes_each_text_once(monkeypatch):
    from appliance.detection.dpi import tls_fingerprint
    from appliance.detection.facts import tls_metadata

    hashed: list[str] = []
    sha12 = tls_fingerprint._sha12
    monkeypatch.setattr(tls_fingerprint, "_sha12", lambda text: (hashed.append(text), sha12(text))[1])
    memo = tls_fingerprint.FingerprintMemo()
    rng = random.Random(3)
    for n in range(20):  # the same software, new GREASE values, extension order and SNI each time: one JA4
        extensions = list(CHROME_EXTENSIONS)
        rng.shuffle(extensions)
        meta = tls_metadata(_flow(tr.client_hello(
            [rng.choice([0x0A0A, 0x1A1A])] + CHROME_CIPHERS, [0x5A5A] + extensions, sni=f"host{n}.example.com",
            alpn=[b"h2", b"http/1.1"], sig_algs=CHROME_SIG_ALGS, versions=[0x3A3A, 0x0304, 0x0303],
            groups=[0x2A2A, 0x001D, 0x0017, 0x0018], point_formats=[0])), memo)
        assert meta is not None and meta.ja4 == "t13d1516h2_8daaf6152771_e5627efa2ab1" and meta.sni == f"host{n}.example.com"
    assert len(hashed) == 2  # ciphers and extensions of the first hello; the 19 after were remembered
    assert len(memo.ja4) == 1 and len(memo.ja3) == 20  # JA3 keeps Chrome's permuted extension order: new each time


def test_the_fingerprint_memo_is_bounded_and_keeps_no_long_key():
    from appliance.detection.dpi.tls_fingerprint import FingerprintMemo, _ja3_of, _ja4_of, _ja4s_of

    memo = FingerprintMemo(entries=4, max_key=60)
    for n in range(10):
        key, ja3_text = f"12d02{n:02d}00|1301,c02f|", f"771,4865-49199,0,,{n}"
        assert memo.ja4[key] == _ja4_of(("12d02%02d00" % n, "1301,c02f", "", ""), "t")
        assert memo.ja3[ja3_text] == _ja3_of(ja3_text)
        assert len(memo.ja4) <= 4 and len(memo.ja3) <= 4  # full: starts over
    long_key = "13d0000h2|" + ",".join(["1301"] * 40) + "|"
    assert memo.ja4[long_key].startswith("t13d0000h2_") and long_key not in memo.ja4
    assert memo.ja4s["1200_c030|ff01,000b"] == _ja4s_of(("1200_c030", "ff01,000b"), "t")
    assert "1200_c030|ff01,000b" in memo.ja4s
