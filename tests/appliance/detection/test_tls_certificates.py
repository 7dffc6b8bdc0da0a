"""Server certificate chains: read from the server's flight, judged against trust anchors, each anomaly
with its evidence; cut and hostile flights never raise."""

from __future__ import annotations

import random

from appliance.detection.dpi.tls_cert import AnomalyLimits, TrustAnchors, chain_anomalies, name_matches, read_certificate
from appliance.detection.dpi.tls_parse import certificate_chain, parse_server_hello
from tests.appliance.detection import tls_certs as tc
from tests.appliance.detection import tls_records as tr

NOW_S = tc.NOW.timestamp()
LIMITS = AnomalyLimits(min_validity_days=3.0, fresh_s=86400.0)


def _judge(chain: list[tc.Issued], sni: str, anchors: TrustAnchors, now_s: float = NOW_S) -> dict[str, dict]:
    infos = [read_certificate(c.der) for c in chain]
    assert all(i is not None for i in infos)
    return {a.detector: {**a.evidence, "reason": a.reason} for a in chain_anomalies(infos, sni, now_s, anchors, LIMITS)}


def test_a_chain_under_a_trusted_root_for_the_right_name_is_clean():
    root, intermediate = tc.public_pki()
    leaf = tc.issue("www.example.com", issuer=intermediate, dns=["www.example.com", "*.example.com"])
    anchors = TrustAnchors([root.cert])
    assert _judge([leaf, intermediate], "www.example.com", anchors) == {}
    assert _judge([leaf, intermediate], "api.example.com", anchors) == {}  # the wildcard covers one label


def test_each_anomaly_is_reported_with_its_evidence():
    root, intermediate = tc.public_pki()
    anchors = TrustAnchors([root.cert])
    selfie = tc.issue("files.example-exfil.net", dns=["files.example-exfil.net"])
    found = _judge([selfie], "files.example-exfil.net", anchors)
    assert set(found) == {"dpi.tls.cert_self_signed"}
    assert found["dpi.tls.cert_self_signed"]["subject"] == "CN=files.example-exfil.net"

    stranger_root, stranger_ca = tc.public_pki()  # same names as the trusted PKI, other keys: a forged issuer
    leaf = tc.issue("www.example.com", issuer=stranger_ca, dns=["www.example.com"])
    found = _judge([leaf, stranger_ca], "www.example.com", anchors)
    assert set(found) == {"dpi.tls.cert_unknown_issuer"}
    assert found["dpi.tls.cert_unknown_issuer"]["chain_top_issuer"] == stranger_root.cert.subject.rfc4514_string()

    short = tc.issue("a.example.com", issuer=intermediate, dns=["a.example.com"], not_before=tc.NOW - tc.DAY, days=2)
    found = _judge([short, intermediate], "a.example.com", anchors)
    assert set(found) == {"dpi.tls.cert_short_validity"} and found["dpi.tls.cert_short_validity"]["validity_days"] == 2

    fresh = tc.issue("b.example.com", issuer=intermediate, dns=["b.example.com"], not_before=tc.NOW - tc.DAY / 12)
    found = _judge([fresh, intermediate], "b.example.com", anchors)
    assert set(found) == {"dpi.tls.cert_fresh"} and found["dpi.tls.cert_fresh"]["age_s"] == 7200

    old = tc.issue("c.example.com", issuer=intermediate, dns=["c.example.com"], not_before=tc.NOW - 100 * tc.DAY, days=90)
    found = _judge([old, intermediate], "c.example.com", anchors)
    assert set(found) == {"dpi.tls.cert_expired"} and "expired" in found["dpi.tls.cert_expired"]["reason"]

    other = tc.issue("d.example.com", issuer=intermediate, dns=["d.example.com"])
    found = _judge([other, intermediate], "login.example-bank.com", anchors)
    assert set(found) == {"dpi.tls.cert_sni_mismatch"} and found["dpi.tls.cert_sni_mismatch"]["dns_names"] == ["d.example.com"]

    by_address = tc.issue("185.220.101.47", issuer=intermediate, ips=["185.220.101.47"])
    found = _judge([by_address, intermediate], "", anchors)
    assert set(found) == {"dpi.tls.cert_ip_address"} and found["dpi.tls.cert_ip_address"]["ip_names"] == ["185.220.101.47"]


def test_wildcards_stand_for_one_label_only():
    assert name_matches("a.example.com", ["*.example.com"])
    assert not name_matches("a.b.example.com", ["*.example.com"]) and not name_matches("example.com", ["*.example.com"])


def test_the_system_bundle_loads_and_vouches_for_nothing_made_here():
    anchors = TrustAnchors.load(__import__("pathlib").Path("/etc/ssl/certs/ca-certificates.crt"))
    assert len(anchors) > 50
    _, intermediate = tc.public_pki()
    assert not anchors.vouches_for(intermediate.cert)
    assert len(TrustAnchors.load(__import__("pathlib").Path("/nonexistent/bundle.pem"))) == 0


def test_the_chain_is_read_from_the_server_flight_and_a_cut_one_says_so():
    root, intermediate = tc.public_pki()
    leaf = tc.issue("www.example.com", issuer=intermediate, dns=["www.example.com"])
    flight = tr.server_flight(0xC02F, [0xFF01, 0x0000], [leaf.der, intermediate.der])
    assert parse_server_hello(flight) is not None
    chain, complete = certificate_chain(flight)
    assert complete and chain == [leaf.der, intermediate.der]
    chain, complete = certificate_chain(flight[: len(flight) - 200])
    assert not complete and chain == [leaf.der]
    assert certificate_chain(tr.server_hello(0x1301, [0x002B], selected=0x0304)) is None  # TLS 1.3: nothing in clear


def test_hostile_flights_never_raise():
    _, intermediate = tc.public_pki()
    leaf = tc.issue("www.example.com", issuer=intermediate, dns=["www.example.com"])
    good = tr.server_flight(0xC02F, [0xFF01], [leaf.der, intermediate.der])
    rng = random.Random(11)
    read = 0
    for _ in range(1500):
        data = bytearray(good)
        for _ in range(rng.randint(1, 6)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        found = certificate_chain(bytes(data[: rng.randint(0, len(data))]))
        for der in (found[0] if found else []):
            read += read_certificate(der) is not None
    assert read > 0  # some survive the damage and are read; the rest are refused without raising
    assert read_certificate(b"\x30\x82\xff\xff" + bytes(100)) is None


def test_certificates_and_signature_checks_are_remembered_bounded_and_by_content():
    """A certificate seen again is not parsed or verified again; the memo is bounded; an unreadable one stays None."""
    from appliance.detection.dpi import tls_cert

    root, intermediate = tc.public_pki()
    leaf = tc.issue("www.example.com", issuer=intermediate, dns=["www.example.com"])
    first = read_certificate(leaf.der)
    assert first is not None and read_certificate(bytes(leaf.der)) is first  # equal bytes, same reading
    garbage = b"\x30\x03\x02\x01\x00"
    assert read_certificate(garbage) is None and garbage in tls_cert._certificates
    anchors = TrustAnchors([root.cert])
    assert _judge([leaf, intermediate], "www.example.com", anchors) == {}
    inter = read_certificate(intermediate.der)
    assert tls_cert._signed[(first.sha256, inter.sha256)] is True
    # Remembered answers are the right ones: a leaf another intermediate signed is still refused.
    _, other = tc.public_pki()
    stranger = tc.issue("www.example.com", issuer=other, dns=["www.example.com"])
    assert "dpi.tls.cert_unknown_issuer" in _judge([stranger, intermediate], "www.example.com", anchors)
    rng = random.Random(9)
    for _ in range(tls_cert._MEMO_SIZE + 10):
        read_certificate(rng.randbytes(40))
    assert len(tls_cert._certificates) <= tls_cert._MEMO_SIZE
    assert read_certificate(leaf.der).sha256 == first.sha256  # read again after the memo was emptied
