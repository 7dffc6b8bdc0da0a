"""EnrollmentStore: enrollment tokens and agent certificates in SQLite (WAL) under the state dir.

Tokens are kept as their SHA-256 only (plus the first 6 characters, which end up in the
certificate's CN anyway), so a copy of the database does not hand out enrollments. A token is
looked up by its hash: the timing of that lookup tells nothing about the token itself.

One connection guarded by one lock: every write is a short transaction, and a redemption
(check + mark used + record certificate) is one `BEGIN IMMEDIATE` transaction, so of any number
of concurrent redemptions of one token exactly one commits.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from appliance.errors import ApplianceError
from appliance.migrations import migrate

log = logging.getLogger(__name__)

class EnrollmentError(ApplianceError):
    """Root of the enrollment package's errors."""


class TokenRefused(EnrollmentError):
    """The token is unknown, expired or already used; `reason` says which (for the log only)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CertificateRecord:
    """One agent certificate the appliance knows, with its binding and revocation state."""

    fingerprint: str
    serial: str
    common_name: str
    enrolled: bool
    token_prefix: str | None
    os: str | None
    issued_at: float | None
    not_after: float | None
    machine_id: str | None
    agent_id: str | None
    bound_at: float | None
    revoked_at: float | None
    revoke_reason: str | None


_CERT_COLUMNS = ("fingerprint, serial, common_name, enrolled, token_prefix, os, issued_at, not_after, "
                 "machine_id, agent_id, bound_at, revoked_at, revoke_reason")


def _record(row: tuple) -> CertificateRecord:
    values = list(row)
    values[3] = bool(values[3])
    return CertificateRecord(*values)


class EnrollmentStore:
    """Persistence of tokens and certificates; no policy beyond the atomic state changes."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        # Created 0600 before SQLite opens it: its -wal and -shm files inherit the database's mode.
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
        path.chmod(0o600)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=10)
        self._lock = threading.RLock()
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            migrate(self._db, "enrollment")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # -- tokens ----------------------------------------------------------------------------
    def add_token(self, token: str, created_at: float, expires_at: float) -> None:
        with self._transaction() as db:
            db.execute("INSERT INTO tokens (token_hash, prefix, created_at, expires_at) VALUES (?, ?, ?, ?)",
                       (token_hash(token), token[:6], created_at, expires_at))

    @contextmanager
    def redeem(self, token: str, now: float, source: str, os_kind: str) -> Iterator[str]:
        """Mark `token` used and yield its prefix, inside one transaction.

        The body runs inside the transaction (issue and record the certificate there): if it
        raises, the token stays unused. Raises TokenRefused when the token is not redeemable.
        """
        digest = token_hash(token)
        with self._transaction() as db:
            cur = db.execute(
                "UPDATE tokens SET used_at = ?, used_by = ?, used_os = ? "
                "WHERE token_hash = ? AND used_at IS NULL AND expires_at > ?",
                (now, source[:64], os_kind, digest, now),
            )
            if cur.rowcount != 1:
                row = db.execute("SELECT used_at, expires_at FROM tokens WHERE token_hash = ?", (digest,)).fetchone()
                if row is None:
                    raise TokenRefused("unknown")
                raise TokenRefused("already used" if row[0] is not None else "expired")
            yield token[:6]

    def token_counts(self, now: float) -> dict[str, int]:
        with self._lock:
            row = self._db.execute(
                "SELECT SUM(used_at IS NULL AND expires_at > ?), SUM(used_at IS NOT NULL), "
                "SUM(used_at IS NULL AND expires_at <= ?) FROM tokens", (now, now)).fetchone()
        return {"unused": row[0] or 0, "used": row[1] or 0, "expired": row[2] or 0}

    # -- certificates ------------------------------------------------------------------------
    def add_certificate(self, *, fingerprint: str, serial: int, common_name: str, token_prefix: str, os_kind: str,
                        issued_at: float, not_after: float, cert_pem: str) -> None:
        """Record a certificate issued by enrollment (call inside `redeem`)."""
        with self._lock:
            self._db.execute(
                "INSERT INTO certificates (fingerprint, serial, common_name, enrolled, token_prefix, os, issued_at, "
                "not_after, cert_pem) VALUES (?, ?, ?, 1, ?, ?, ?, ?, ?)",
                (fingerprint, format(serial, "x"), common_name, token_prefix, os_kind, issued_at, not_after, cert_pem),
            )

    def certificate(self, fingerprint: str) -> CertificateRecord | None:
        with self._lock:
            row = self._db.execute(f"SELECT {_CERT_COLUMNS} FROM certificates WHERE fingerprint = ?",
                                   (fingerprint,)).fetchone()
        return _record(row) if row else None

    def certificates(self, limit: int = 1000) -> list[CertificateRecord]:
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_CERT_COLUMNS} FROM certificates ORDER BY COALESCE(issued_at, bound_at) DESC LIMIT ?",
                (limit,)).fetchall()
        return [_record(r) for r in rows]

    def bind(self, fingerprint: str, machine_id: str, agent_id: str, now: float) -> tuple[CertificateRecord, list[str]]:
        """Bind a recorded, unbound certificate to a machine.

        Returns the certificate as it now stands and the fingerprints of enrolled certificates
        this one superseded (an enrolled certificate replaces older enrolled ones of the machine).
        Binding is first-wins: a certificate already bound keeps its machine.
        """
        with self._transaction() as db:
            row = db.execute(f"SELECT {_CERT_COLUMNS} FROM certificates WHERE fingerprint = ?", (fingerprint,)).fetchone()
            if row is None:
                raise EnrollmentError(f"certificate {fingerprint[:16]} is not known")
            record = _record(row)
            if record.machine_id is not None:
                return record, []
            enrolled = record.enrolled
            db.execute("UPDATE certificates SET machine_id = ?, agent_id = ?, bound_at = ? WHERE fingerprint = ?",
                       (machine_id, agent_id, now, fingerprint))
            superseded: list[str] = []
            if enrolled:
                superseded = [r[0] for r in db.execute(
                    "SELECT fingerprint FROM certificates WHERE machine_id = ? AND enrolled = 1 AND fingerprint != ? "
                    "AND revoked_at IS NULL", (machine_id, fingerprint))]
                db.executemany(
                    "UPDATE certificates SET revoked_at = ?, revoke_reason = 'superseded by re-enrollment' "
                    "WHERE fingerprint = ?", [(now, fp) for fp in superseded])
            new = db.execute(f"SELECT {_CERT_COLUMNS} FROM certificates WHERE fingerprint = ?", (fingerprint,)).fetchone()
        return _record(new), superseded

    def revoke(self, agent_or_fingerprint: str, now: float, reason: str) -> tuple[int, int]:
        """Revoke every certificate of an agent (or one certificate by fingerprint).

        Returns (matched, newly revoked); matched 0 means nothing is known under that id.
        """
        key = agent_or_fingerprint
        with self._transaction() as db:
            matched = db.execute("SELECT COUNT(*) FROM certificates WHERE agent_id = ? OR fingerprint = ?",
                                 (key, key)).fetchone()[0]
            if matched == 0 and re.fullmatch(r"[0-9a-f]{64}", key):
                # A certificate enrollment never issued (tooling): remember it as revoked.
                db.execute("INSERT INTO certificates (fingerprint, serial, common_name, enrolled, revoked_at, "
                           "revoke_reason) VALUES (?, '', '', 0, ?, ?)", (key, now, reason))
                return 1, 1
            cur = db.execute(
                "UPDATE certificates SET revoked_at = ?, revoke_reason = ? "
                "WHERE (agent_id = ? OR fingerprint = ?) AND revoked_at IS NULL", (now, reason, key, key))
        return matched, cur.rowcount
