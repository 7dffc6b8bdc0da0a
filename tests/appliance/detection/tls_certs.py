"""Certificates for TLS tests, made with `cryptography` (EC P-256 keys keep a chain in one segment)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

NOW = datetime.datetime(2026, 11, 20, 12, 0, tzinfo=datetime.UTC)
DAY = datetime.timedelta(days=1)


@dataclass
class Issued:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def der(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.DER)

    @property
    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)


def _name(cn: str, org: str = "") -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        parts.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(parts)


def issue(cn: str, *, issuer: Issued | None = None, dns: list[str] = (), ips: list[str] = (), ca: bool = False,
          not_before: datetime.datetime = NOW - 30 * DAY, days: float = 90, org: str = "",
          issuer_name: x509.Name | None = None) -> Issued:
    """A certificate for `cn` signed by `issuer` (self-signed without one); `issuer_name` forges the name."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = _name(cn, org)
    builder = (x509.CertificateBuilder().subject_name(subject)
               .issuer_name(issuer_name or (issuer.cert.subject if issuer else subject))
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(not_before).not_valid_after(not_before + datetime.timedelta(days=days))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    names = [x509.DNSName(d) for d in dns] + [x509.IPAddress(ipaddress.ip_address(a)) for a in ips]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(issuer.key if issuer else key, hashes.SHA256())
    return Issued(cert, key)


def public_pki(at: datetime.datetime = NOW) -> tuple[Issued, Issued]:
    """A root (the test's trust anchor) and an intermediate under it, like a public CA's, valid at `at`."""
    root = issue("Test Public Root R1", ca=True, days=3650, not_before=at - 1000 * DAY, org="Test Trust Services")
    intermediate = issue("Test Public CA R3", issuer=root, ca=True, days=1500, not_before=at - 500 * DAY,
                         org="Test Trust Services")
    return root, intermediate
