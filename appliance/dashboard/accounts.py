"""Console accounts in SQLite: usernames, roles, scrypt password hashes, disabled flags."""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from appliance.errors import ApplianceError

ROLES = ("admin", "analyst")
USERNAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
MIN_PASSWORD, MAX_PASSWORD = 12, 256
# scrypt cost (RFC 7914; OWASP's minimum is N=2**17 with r=8, p=1 — lowered to 2**15 for this 2-core box: ~32 MiB
# and ~60 ms a check, and sign-in is rate limited per account and per address anyway).
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**15, 8, 1
FIRST_ADMIN = "admin"
FIRST_ADMIN_FILE = "console-admin.password"


class AccountError(ApplianceError):
    """An account operation was refused; `field` names the bad input."""

    def __init__(self, message: str, field: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.code = code


@dataclass(frozen=True)
class User:
    username: str
    role: str
    disabled: bool
    created_at: float
    last_login: float | None

    def public(self) -> dict[str, object]:
        return {"username": self.username, "role": self.role}


def hash_password(password: str, salt: bytes | None = None) -> str:
    salt = salt or os.urandom(16)
    digest = hashlib.scrypt(password.encode("utf-8"), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P,
                            maxmem=128 * 1024 * 1024, dklen=32)
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${salt.hex()}${digest.hex()}"


def verify_password(password: str, encoded: str) -> bool:
    """Constant-time check of `password` against a `hash_password` string."""
    try:
        _, n, r, p, salt, digest = encoded.split("$")
        computed = hashlib.scrypt(password.encode("utf-8", "surrogateescape"), salt=bytes.fromhex(salt), n=int(n),
                                  r=int(r), p=int(p), maxmem=128 * 1024 * 1024, dklen=len(digest) // 2)
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(computed.hex(), digest)


def check_password_rules(password: str, field: str = "password") -> None:
    if not MIN_PASSWORD <= len(password) <= MAX_PASSWORD:
        raise AccountError(f"{field}: must be {MIN_PASSWORD} to {MAX_PASSWORD} characters", field=field)


class UserStore:
    """Accounts in `<state_dir>/console.sqlite3`; one connection serialised by a lock."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(str(path), check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._lock = threading.Lock()
        with self._lock, self._conn:
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS users (username TEXT PRIMARY KEY, role TEXT NOT NULL, password TEXT NOT NULL, "
                "disabled INTEGER NOT NULL DEFAULT 0, created_at REAL NOT NULL, last_login REAL)")
        os.chmod(path, 0o600)
        # Verified against when the username is unknown, so that both cases cost one scrypt.
        self._dummy = hash_password(secrets.token_urlsafe(16))

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    @staticmethod
    def _user(row: tuple[object, ...]) -> User:
        return User(str(row[0]), str(row[1]), bool(row[2]), float(row[3]),  # type: ignore[arg-type]
                    None if row[4] is None else float(row[4]))  # type: ignore[arg-type]

    def get(self, username: str) -> User | None:
        with self._lock:
            row = self._conn.execute("SELECT username, role, disabled, created_at, last_login FROM users WHERE username = ?",
                                     (username,)).fetchone()
        return self._user(row) if row else None

    def all(self) -> list[User]:
        with self._lock:
            rows = self._conn.execute("SELECT username, role, disabled, created_at, last_login FROM users ORDER BY username").fetchall()
        return [self._user(r) for r in rows]

    def count(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM users").fetchone()[0])

    def create(self, username: str, password: str, role: str) -> User:
        if not USERNAME.match(username):
            raise AccountError("username: 1-64 letters, digits, dot, underscore or hyphen", field="username")
        if role not in ROLES:
            raise AccountError(f"role: must be one of {', '.join(ROLES)}", field="role")
        check_password_rules(password)
        encoded = hash_password(password)
        try:
            with self._lock, self._conn:
                self._conn.execute("INSERT INTO users (username, role, password, disabled, created_at) VALUES (?, ?, ?, 0, ?)",
                                   (username, role, encoded, time.time()))
        except sqlite3.IntegrityError:
            raise AccountError(f"username: {username!r} already exists", field="username", code="exists") from None
        user = self.get(username)
        assert user is not None
        return user

    def authenticate(self, username: str, password: str) -> User | None:
        """The user when the password matches and the account is enabled; None otherwise (same cost)."""
        with self._lock:
            row = self._conn.execute("SELECT password, disabled FROM users WHERE username = ?", (username,)).fetchone()
        ok = verify_password(password, row[0] if row else self._dummy)
        if not ok or row is None or row[1]:
            return None
        with self._lock, self._conn:
            self._conn.execute("UPDATE users SET last_login = ? WHERE username = ?", (time.time(), username))
        return self.get(username)

    def set_password(self, username: str, password: str) -> None:
        check_password_rules(password, "new")
        with self._lock, self._conn:
            self._conn.execute("UPDATE users SET password = ? WHERE username = ?", (hash_password(password), username))

    def update(self, username: str, *, disabled: bool | None = None, role: str | None = None) -> User | None:
        if role is not None and role not in ROLES:
            raise AccountError(f"role: must be one of {', '.join(ROLES)}", field="role")
        with self._lock, self._conn:
            if disabled is not None:
                self._conn.execute("UPDATE users SET disabled = ? WHERE username = ?", (int(disabled), username))
            if role is not None:
                self._conn.execute("UPDATE users SET role = ? WHERE username = ?", (role, username))
        return self.get(username)

    def ensure_first_admin(self, state_dir: Path) -> str | None:
        """With no account at all, create `admin` with a generated password, write it to a 0600 file and return it."""
        if self.count():
            return None
        password = secrets.token_urlsafe(18)
        self.create(FIRST_ADMIN, password, "admin")
        path = state_dir / FIRST_ADMIN_FILE
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(password + "\n")
        return password
