"""Server certificates seen in clear (TLS 1.2 and earlier): what they say, and what is odd about them.

Certificates are read with `cryptography` (never by hand); a certificate it cannot read is counted
and skipped. The anomalies are the ones analysts look for on connections to the internet: a
self-signed certificate, an issuer no trusted root vouches for, a validity of a few days or a
certificate issued moments ago, a server name that is not among the names, a certificate for an
address, an expired chain. Each comes with its evidence.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import logging
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable
from typing import Any, TypeVar

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.utils import CryptographyDeprecationWarning
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa

log = logging.getLogger(__name__)

# Debian's ca-certificates bundle: the roots the system trusts (paths.tls_trust_anchors).
SYSTEM_TRUST_ANCHORS = Path("/etc/ssl/certs/ca-certificates.crt")
_DAY_S = 86400.0


@dataclass(slots=True)
class CertificateInfo:
    """One certificate of a chain, as the anomaly checks and the REST flow view need it."""

    subject: str  # RFC 4514
    issuer: str
    dns_names: list[str]  # subjectAltName dNSName entries, lower case
    ip_names: list[str]  # subjectAltName iPAddress entries
    common_name: str
    not_before_s: float  # Unix seconds
    not_after_s: float
    self_signed: bool  # issued by itself: same name, and its own key verifies its signature
    key_type: str  # rsa, ec, ed25519, ed448, dsa
    key_bits: int
    sha256: str
    cert: x509.Certificate = field(repr=False)

    @property
    def validity_days(self) -> float:
        return (self.not_after_s - self.not_before_s) / _DAY_S

    def view(self) -> dict[str, Any]:
        return {"subject": self.subject, "issuer": self.issuer, "dns_names": self.dns_names[:20],
                "ip_names": self.ip_names[:20], "not_before": _iso(self.not_before_s), "not_after": _iso(self.not_after_s),
                "self_signed": self.self_signed, "key_type": self.key_type, "key_bits": self.key_bits, "sha256": self.sha256}


def _iso(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).isoformat().replace("+00:00", "Z")


def _key(cert: x509.Certificate) -> tuple[str, int]:
    try:
        key = cert.public_key()
    except (ValueError, UnsupportedAlgorithm):
        return "unknown", 0
    if isinstance(key, rsa.RSAPublicKey):
        return "rsa", key.key_size
    if isinstance(key, ec.EllipticCurvePublicKey):
        return "ec", key.curve.key_size
    if isinstance(key, ed25519.Ed25519PublicKey):
        return "ed25519", 256
    if isinstance(key, ed448.Ed448PublicKey):
        return "ed448", 456
    if isinstance(key, dsa.DSAPublicKey):
        return "dsa", key.key_size
    return "unknown", 0


def issued_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    """True when `issuer`'s name and key account for `cert`'s issuer name and signature."""
    try:
        cert.verify_directly_issued_by(issuer)
        return True
    except (ValueError, TypeError, InvalidSignature, UnsupportedAlgorithm):
        return False


# Servers send the same few certificates to every client, and reading one (x509 parsing, names, key, its
# own signature when self-issued) costs ~35-40 us: what was read is remembered by its DER bytes. Keys are
# bytes, hashed by Python's per-process keyed SipHash (a certificate is attacker-chosen); full means
# forgotten at once, as the other caches of the analysis side do.
_MEMO_SIZE = 4096
_certificates: dict[bytes, CertificateInfo | None] = {}
_signed: dict[tuple[str, str], bool] = {}  # (certificate sha256, issuer sha256) -> issued_by
_MISSING = object()
K = TypeVar("K")
V = TypeVar("V")


def _remembered(memo: dict[K, V], key: K, compute: Callable[[], V]) -> V:
    """memo[key], computed on first use; a full memo is emptied (bounded whatever the traffic)."""
    found = memo.get(key, _MISSING)
    if found is _MISSING:
        found = compute()
        if len(memo) >= _MEMO_SIZE:
            memo.clear()
        memo[key] = found
    return found  # type: ignore[return-value]


def forget_certificates() -> None:
    """Empty the certificate and signature memos (the bench measures a chain seen for the first time)."""
    _certificates.clear()
    _signed.clear()


def read_certificate(der: bytes) -> CertificateInfo | None:
    """The certificate in `der`, or None when `cryptography` cannot read it (remembered either way)."""
    return _remembered(_certificates, bytes(der), lambda: _read_certificate(der))


def _linked(child: CertificateInfo, parent: CertificateInfo) -> bool:
    """issued_by(child, parent), remembered by the pair's SHA-256 (a signature check costs 20-60 us)."""
    return _remembered(_signed, (child.sha256, parent.sha256), lambda: issued_by(child.cert, parent.cert))


def _read_certificate(der: bytes) -> CertificateInfo | None:
    try:
        cert = x509.load_der_x509_certificate(der)
        subject, issuer = cert.subject.rfc4514_string(), cert.issuer.rfc4514_string()
        try:
            sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            dns_names = [n.lower().rstrip(".") for n in sans.get_values_for_type(x509.DNSName)][:100]
            ip_names = [str(a) for a in sans.get_values_for_type(x509.IPAddress)][:100]
        except x509.ExtensionNotFound:
            dns_names, ip_names = [], []
        cns = cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
        common_name = str(cns[0].value).lower() if cns else ""
        key_type, key_bits = _key(cert)
        return CertificateInfo(
            subject=subject, issuer=issuer, dns_names=dns_names, ip_names=ip_names, common_name=common_name,
            not_before_s=cert.not_valid_before_utc.timestamp(), not_after_s=cert.not_valid_after_utc.timestamp(),
            self_signed=cert.subject == cert.issuer and issued_by(cert, cert), key_type=key_type, key_bits=key_bits,
            sha256=hashlib.sha256(der).hexdigest(), cert=cert)
    except Exception:  # noqa: BLE001 - hostile DER reaches corners of the parser that raise KeyError and others
        return None


class TrustAnchors:
    """The roots the appliance trusts, by subject name (several roots may share one)."""

    def __init__(self, roots: list[x509.Certificate]) -> None:
        self._by_subject: dict[bytes, list[x509.Certificate]] = {}
        self._vouched: dict[str, bool] = {}  # certificate sha256 -> vouches_for
        for root in roots:
            self._by_subject.setdefault(root.subject.public_bytes(), []).append(root)

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_subject.values())

    @classmethod
    def load(cls, path: Path) -> TrustAnchors:
        """The PEM bundle at `path`; an unreadable bundle gives no anchors (every issuer is then unknown)."""
        try:
            with warnings.catch_warnings():  # a few system roots predate RFC 5280's positive serials
                warnings.simplefilter("ignore", CryptographyDeprecationWarning)
                roots = x509.load_pem_x509_certificates(path.read_bytes())
        except (OSError, ValueError) as err:
            log.warning("TLS trust anchors not loaded from %s: %s", path, err)
            roots = []
        return cls(roots)

    def vouches_for(self, cert: x509.Certificate) -> bool:
        """True when `cert` is an anchor or was signed by one."""
        for root in self._by_subject.get(cert.issuer.public_bytes(), ()):
            if root == cert or issued_by(cert, root):
                return True
        return False

    def vouches_for_info(self, info: CertificateInfo) -> bool:
        """`vouches_for(info.cert)`, remembered by the certificate's SHA-256 for these anchors."""
        return _remembered(self._vouched, info.sha256, lambda: self.vouches_for(info.cert))


def name_matches(name: str, patterns: list[str]) -> bool:
    """RFC 6125 6.4: exact, or a left-most `*` label standing for exactly one label."""
    for pattern in patterns:
        if pattern == name:
            return True
        if pattern.startswith("*.") and "." in name and name.split(".", 1)[1] == pattern[2:]:
            return True
    return False


@dataclass(slots=True)
class Anomaly:
    detector: str  # dpi.tls.cert_<kind>
    confidence: float
    reason: str
    evidence: dict[str, Any]


@dataclass(frozen=True, slots=True)
class AnomalyLimits:
    min_validity_days: float
    fresh_s: float


def chain_anomalies(chain: list[CertificateInfo], sni: str, now_s: float, anchors: TrustAnchors,
                    limits: AnomalyLimits) -> list[Anomaly]:
    """What is odd about a server's chain (leaf first) on a connection made at `now_s` for `sni`."""
    if not chain:
        return []
    leaf = chain[0]
    out: list[Anomaly] = []
    base = {"subject": leaf.subject, "issuer": leaf.issuer, "sha256": leaf.sha256, "chain_length": len(chain)}
    if leaf.self_signed:
        out.append(Anomaly("dpi.tls.cert_self_signed", 0.5, f"self-signed certificate {leaf.subject}", base))
    else:
        # The chain is trusted when some certificate in it is an anchor or is signed by one, and each
        # certificate below it is signed by the next (servers send the chain leaf first).
        linked = 1
        while linked < len(chain) and _linked(chain[linked - 1], chain[linked]):
            linked += 1
        if not any(anchors.vouches_for_info(c) for c in chain[:linked]):
            top = chain[linked - 1]
            out.append(Anomaly("dpi.tls.cert_unknown_issuer", 0.45,
                               f"no trusted root vouches for {leaf.subject} (chain ends at issuer {top.issuer})",
                               {**base, "chain_top_issuer": top.issuer}))
    if leaf.validity_days < limits.min_validity_days:
        out.append(Anomaly("dpi.tls.cert_short_validity", 0.35,
                           f"certificate valid for {leaf.validity_days * 24:.1f} hours", {**base, "validity_days": round(leaf.validity_days, 2)}))
    age_s = now_s - leaf.not_before_s
    if 0 <= age_s < limits.fresh_s:
        out.append(Anomaly("dpi.tls.cert_fresh", 0.25, f"certificate issued {age_s / 3600:.1f} hours before the connection",
                           {**base, "age_s": round(age_s), "not_before": _iso(leaf.not_before_s)}))
    expired = [c for c in chain if not (c.not_before_s <= now_s <= c.not_after_s)]
    if expired:
        first = expired[0]
        state = "expired" if now_s > first.not_after_s else "not yet valid"
        out.append(Anomaly("dpi.tls.cert_expired", 0.4, f"{state} certificate in the chain: {first.subject}",
                           {**base, "not_before": _iso(first.not_before_s), "not_after": _iso(first.not_after_s),
                            "expired_subject": first.subject}))
    names = leaf.dns_names or ([leaf.common_name] if leaf.common_name else [])
    if sni and not _is_address(sni) and not name_matches(sni, names):
        out.append(Anomaly("dpi.tls.cert_sni_mismatch", 0.45, f"SNI {sni} is not among the certificate's names",
                           {**base, "sni": sni, "dns_names": names[:20]}))
    if leaf.ip_names or _is_address(leaf.common_name):
        out.append(Anomaly("dpi.tls.cert_ip_address", 0.35, "certificate issued for an IP address",
                           {**base, "ip_names": leaf.ip_names[:20] or [leaf.common_name]}))
    return out


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False
