"""CertificateAuthority: the appliance's own CA, its server certificate, and agent certificates.

Files live in `paths.certs_dir` as PEM: `ca.pem`/`ca.key`, `server.pem`/`server.key`. Keys are
written 0600, every file atomically (temp file + rename). Existing files are reused and never
overwritten; a file that does not parse stops start-up with a message naming it.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import os
import socket
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from appliance.errors import ApplianceError

CA_CERT = "ca.pem"
CA_KEY = "ca.key"
SERVER_CERT = "server.pem"
SERVER_KEY = "server.key"
# A stable SAN that agents can always use, whatever address the appliance has today (document it).
SERVER_SAN_NAME = "sensor-appliance"

_CA_DAYS = 3650
_SERVER_DAYS = 825


class PkiError(ApplianceError):
    """A certificate or key file is missing, corrupt or does not match."""


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write `data` to `path` via a temp file in the same directory and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def fingerprint(cert: x509.Certificate) -> str:
    """SHA-256 fingerprint, lower-case hex without separators."""
    return cert.fingerprint(hashes.SHA256()).hex()


def default_server_names() -> list[str]:
    """The host name, localhost, 127.0.0.1, every non-loopback address of the host, and SERVER_SAN_NAME."""
    names = [socket.gethostname(), "localhost", "127.0.0.1", *_host_addresses()]
    names.append(SERVER_SAN_NAME)
    return list(dict.fromkeys(n for n in names if n))


def _host_addresses() -> list[str]:
    """The host's non-loopback addresses from netlink; none where netlink is unavailable (an unusual sandbox).

    pyroute2's synchronous IPRoute drives an event loop of its own, which it cannot do on a thread whose loop is
    running (an embedder or a test that builds the appliance from asyncio code): there the query runs on a
    thread of its own, instead of failing into a certificate without the host's addresses."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # no loop running here: the usual case (`python -m appliance`)
        return _read_host_addresses()
    found: list[list[str]] = []
    reader = threading.Thread(target=lambda: found.append(_read_host_addresses()), name="host-addresses")
    reader.start()
    reader.join()
    return found[0] if found else []


def _read_host_addresses() -> list[str]:
    try:
        from pyroute2 import IPRoute

        with IPRoute() as ipr:
            values = [addr.get_attr("IFA_ADDRESS") for addr in ipr.get_addr()]
    except Exception:  # no netlink: the host name still works
        return []
    return [v.split("%")[0] for v in values if v and not ipaddress.ip_address(v.split("%")[0]).is_loopback]


def _san(names: list[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for name in names:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(entries)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


@dataclass(frozen=True)
class IssuedCertificate:
    """A freshly issued agent certificate with its key (PEM)."""

    cert_pem: bytes
    key_pem: bytes
    serial: int
    fingerprint: str
    common_name: str
    not_after: dt.datetime


class CertificateAuthority:
    """Loads or creates the CA and server certificate; issues agent client certificates."""

    def __init__(self, certs_dir: Path, ca_cert: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey) -> None:
        self.certs_dir = certs_dir
        self.ca_cert = ca_cert
        self.ca_key = ca_key

    # -- loading ------------------------------------------------------------------------------
    @classmethod
    def ensure(cls, certs_dir: Path, server_names: list[str]) -> CertificateAuthority:
        """Load the CA and server certificate, creating whichever is absent."""
        certs_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(certs_dir, 0o700)
        ca_cert_path, ca_key_path = certs_dir / CA_CERT, certs_dir / CA_KEY
        if ca_cert_path.exists() != ca_key_path.exists():
            raise PkiError(f"{certs_dir}: found only one of {CA_CERT} and {CA_KEY}; restore the other or remove both")
        if ca_cert_path.exists():
            ca_cert = _load_cert(ca_cert_path)
            ca_key = _load_key(ca_key_path)
            if not _same_key(ca_cert, ca_key):
                raise PkiError(f"{ca_key_path}: does not match {ca_cert_path}")
        else:
            ca_key = ec.generate_private_key(ec.SECP256R1())
            name = x509.Name([
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Sensor Appliance"),
                x509.NameAttribute(NameOID.COMMON_NAME, "Sensor Appliance Root CA"),
            ])
            now = _now()
            ca_cert = (
                x509.CertificateBuilder()
                .subject_name(name)
                .issuer_name(name)
                .public_key(ca_key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(minutes=5))
                .not_valid_after(now + dt.timedelta(days=_CA_DAYS))
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(
                    x509.KeyUsage(
                        digital_signature=False, content_commitment=False, key_encipherment=False,
                        data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                        encipher_only=False, decipher_only=False,
                    ),
                    critical=True,
                )
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
                .sign(ca_key, hashes.SHA256())
            )
            write_atomic(ca_key_path, key_pem(ca_key), 0o600)
            write_atomic(ca_cert_path, cert_pem(ca_cert))
        ca = cls(certs_dir, ca_cert, ca_key)
        ca._ensure_server(server_names)
        return ca

    def _ensure_server(self, server_names: list[str]) -> None:
        cert_path, key_path = self.server_cert_path, self.server_key_path
        if cert_path.exists() and key_path.exists():
            cert = _load_cert(cert_path)
            key = _load_key(key_path)
            if not _same_key(cert, key):
                raise PkiError(f"{key_path}: does not match {cert_path}")
            return
        key = ec.generate_private_key(ec.SECP256R1())
        now = _now()
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, server_names[0])]))
            .issuer_name(self.ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=_SERVER_DAYS))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_san(server_names), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.ca_key.public_key()), critical=False)
            .sign(self.ca_key, hashes.SHA256())
        )
        write_atomic(key_path, key_pem(key), 0o600)
        write_atomic(cert_path, cert_pem(cert))

    # -- paths and facts ----------------------------------------------------------------------
    @property
    def ca_cert_path(self) -> Path:
        return self.certs_dir / CA_CERT

    @property
    def server_cert_path(self) -> Path:
        return self.certs_dir / SERVER_CERT

    @property
    def server_key_path(self) -> Path:
        return self.certs_dir / SERVER_KEY

    @property
    def ca_pem(self) -> bytes:
        return cert_pem(self.ca_cert)

    @property
    def ca_fingerprint(self) -> str:
        return fingerprint(self.ca_cert)

    def server_cert(self) -> x509.Certificate:
        return _load_cert(self.server_cert_path)

    # -- issuing ------------------------------------------------------------------------------
    def issue_agent(self, common_name: str, days: int = 365) -> IssuedCertificate:
        """A new client certificate (clientAuth) and key for one agent, signed by the CA."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = _now()
        serial = x509.random_serial_number()
        not_after = now + dt.timedelta(days=days)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self.ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(serial)
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True, content_commitment=False, key_encipherment=False,
                    data_encipherment=False, key_agreement=True, key_cert_sign=False, crl_sign=False,
                    encipher_only=False, decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.ca_key.public_key()), critical=False)
            .sign(self.ca_key, hashes.SHA256())
        )
        return IssuedCertificate(cert_pem(cert), key_pem(key), serial, fingerprint(cert), common_name, not_after)


def _same_key(cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> bool:
    """Whether `key` is the private half of the certificate's public key."""
    spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return cert.public_key().public_bytes(*spki) == key.public_key().public_bytes(*spki)


def _load_cert(path: Path) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(path.read_bytes())
    except (ValueError, OSError) as err:
        raise PkiError(f"{path}: not a readable PEM certificate ({err}); restore it or remove it to regenerate") from None


def _load_key(path: Path) -> ec.EllipticCurvePrivateKey:
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (ValueError, TypeError, OSError) as err:
        raise PkiError(f"{path}: not a readable PEM private key ({err}); restore it or remove it to regenerate") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise PkiError(f"{path}: expected an EC private key")
    return key
