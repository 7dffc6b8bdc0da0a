"""The appliance PKI: CA and server certificate created once, with the documented SANs, and reused."""

from __future__ import annotations

import ipaddress
import socket

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from appliance.app import build
from appliance.pki import SERVER_SAN_NAME, PkiError, default_server_names
from tests.conftest import appliance_settings


def _sans(cert: x509.Certificate) -> set[str]:
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return {str(v) for v in san.get_values_for_type(x509.DNSName)} | \
        {str(v) for v in san.get_values_for_type(x509.IPAddress)}


def test_ca_and_server_certificate_are_generated_with_the_sans(tmp_path, monkeypatch):
    monkeypatch.delenv("SENSOR_ADMIN_TOKEN", raising=False)
    app = build(appliance_settings(tmp_path, tls={"server_names": ["appliance.example.net", "10.9.8.7"]}))
    certs = tmp_path / "certs"
    ca = x509.load_pem_x509_certificate((certs / "ca.pem").read_bytes())
    assert isinstance(ca.public_key(), ec.EllipticCurvePublicKey) and ca.public_key().curve.name == "secp256r1"
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    usage = ca.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.key_cert_sign and usage.crl_sign
    assert 3649 <= (ca.not_valid_after_utc - ca.not_valid_before_utc).days <= 3651

    server = x509.load_pem_x509_certificate((certs / "server.pem").read_bytes())
    server.verify_directly_issued_by(ca)
    eku = server.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in eku
    sans = _sans(server)
    assert {"appliance.example.net", "10.9.8.7", "localhost", "127.0.0.1", SERVER_SAN_NAME, socket.gethostname()} <= sans
    for name in default_server_names():  # every non-loopback address of the host too
        assert name in sans
    assert all(not ipaddress.ip_address(a).is_loopback for a in default_server_names()[3:-1])
    for key in ("ca.key", "server.key"):
        assert (certs / key).stat().st_mode & 0o777 == 0o600
    assert not list(certs.glob(".*"))  # no temp files left behind
    # The public CA certificate is part of the payload; the keys never are.
    assert (tmp_path / "static" / "ca.pem").read_bytes() == (certs / "ca.pem").read_bytes()
    app.enrollment_store.close()


def test_server_names_are_the_same_when_asked_from_a_running_event_loop(recwarn):
    """pyroute2's synchronous netlink socket cannot run on a thread whose event loop runs (a test driving a browser,
    an embedder's asyncio code): the host's addresses must still reach the certificate, with no warning."""
    import asyncio

    async def from_a_loop() -> list[str]:
        return default_server_names()

    outside = default_server_names()
    assert len(outside) > 4, "this host has a non-loopback address (the test would prove nothing without one)"
    assert asyncio.run(from_a_loop()) == outside
    assert not [w for w in recwarn if "never awaited" in str(w.message)]


def test_existing_certificates_are_reused_never_overwritten(tmp_path, monkeypatch):
    monkeypatch.delenv("SENSOR_ADMIN_TOKEN", raising=False)
    build(appliance_settings(tmp_path))
    certs = tmp_path / "certs"
    before = {p.name: p.read_bytes() for p in certs.iterdir()}
    build(appliance_settings(tmp_path, tls={"server_names": ["renamed.example"]}))
    assert {p.name: p.read_bytes() for p in certs.iterdir()} == before


@pytest.mark.parametrize("victim", ["ca.pem", "ca.key", "server.pem", "server.key"])
def test_a_corrupt_certificate_file_is_a_clear_startup_error(tmp_path, monkeypatch, victim):
    monkeypatch.delenv("SENSOR_ADMIN_TOKEN", raising=False)
    build(appliance_settings(tmp_path))
    (tmp_path / "certs" / victim).write_text("-----BEGIN GARBAGE-----\n")
    with pytest.raises(PkiError, match=victim):
        build(appliance_settings(tmp_path))
