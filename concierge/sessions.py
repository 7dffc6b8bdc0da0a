"""Users' passwords, server-side sessions and the per-request auth context."""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
from dataclasses import dataclass, field
from typing import Any

import bottle

from concierge.clock import Clock
from concierge.database import Database, Row

log = logging.getLogger(__name__)

COOKIE = "concierge_session"
CSRF_COOKIE = "concierge_csrf"  # readable by same-origin JS (double-submit helper); the server checks the session's token


class PasswordHasher:
    """scrypt (memory-hard, in the standard library); the cost is stored with each hash."""

    def __init__(self, n: int = 2**14, r: int = 8, p: int = 1) -> None:
        self.n, self.r, self.p = n, r, p
        self._dummy = self.hash("timing-equaliser")

    def hash(self, password: str) -> str:
        salt = secrets.token_bytes(16)
        digest = hashlib.scrypt(password.encode(), salt=salt, n=self.n, r=self.r, p=self.p, maxmem=256 * 1024 * 1024, dklen=32)
        b64 = base64.b64encode
        return f"scrypt${self.n}${self.r}${self.p}${b64(salt).decode()}${b64(digest).decode()}"

    def verify(self, password: str, stored: str | None) -> bool:
        """Constant work whether or not the user exists (stored None checks against a dummy)."""
        _, n, r, p, salt, digest = (stored or self._dummy).split("$")
        got = hashlib.scrypt(password.encode(), salt=base64.b64decode(salt), n=int(n), r=int(r), p=int(p), maxmem=256 * 1024 * 1024, dklen=32)
        return stored is not None and hmac.compare_digest(got, base64.b64decode(digest))


def _cookie(header: str, name: str) -> str | None:
    """One cookie's value from a Cookie header (`a=b; c=d`). Session ids are URL-safe tokens, so no quoting
    rules apply; http.cookies parsed the whole header with regular expressions on every request."""
    for part in header.split(";"):
        key, sep, value = part.strip().partition("=")
        if sep and key == name:
            return value
    return None


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


@dataclass
class AuthContext:
    """The caller, per request: `user`, and `auth` = (userId, organizationId, role resolved on demand)."""

    user_id: str
    organization_id: str | None
    session_hash: str
    csrf_token: str
    role_seen: str | None = None
    via_cookie: bool = True
    role: str | None = None
    resolved: bool = False
    user: Row = field(default_factory=dict)
    member_role: str | None = None  # read with the session (one query per request), adopted by resolve_role
    member_role_loaded: bool = False

    def csrf_matches(self, token: str) -> bool:
        return bool(token) and hmac.compare_digest(token, self.csrf_token)

    def as_auth(self) -> dict[str, Any]:
        return {"userId": self.user_id, "organizationId": self.organization_id, "role": self.role}


class SessionStore:
    """Sessions and memberships persistence (ids stored hashed, never in clear)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def insert(self, session_id: str, user_id: str, org_id: str | None, csrf: str, role: str | None, now: float, expires: float) -> None:
        with self.db.transaction() as tx:
            tx.execute(
                "INSERT INTO sessions (id_hash, user_id, organization_id, csrf_token, role_seen, created_at, last_seen_at, expires_at) VALUES (?,?,?,?,?,?,?,?)",
                (_digest(session_id), user_id, org_id, csrf, role, now, now, expires),
            )

    def rotate(self, id_hash: str, session_id: str, role: str | None, now: float) -> None:
        """Move a session to a new id (same user, organization, CSRF token and expiry) for a new role."""
        with self.db.transaction() as tx:
            tx.execute(
                "INSERT INTO sessions (id_hash, user_id, organization_id, csrf_token, role_seen, created_at, last_seen_at, expires_at) "
                "SELECT ?, user_id, organization_id, csrf_token, ?, created_at, ?, expires_at FROM sessions WHERE id_hash = ?",
                (_digest(session_id), role, now, id_hash),
            )
            tx.execute("UPDATE sessions SET revoked_at = ? WHERE id_hash = ?", (now, id_hash))

    def lookup(self, session_id: str) -> Row | None:
        with self.db.statements() as tx:  # one statement: its own snapshot
            return tx.one(  # the membership's current role comes with it: no second look-up when a route needs the role
                "SELECT s.*, u.email, u.name, m.role AS member_role FROM sessions s JOIN users u ON u.id = s.user_id "
                "LEFT JOIN memberships m ON m.user_id = s.user_id AND m.organization_id = s.organization_id "
                "WHERE s.id_hash = ? AND s.revoked_at IS NULL",
                (_digest(session_id),),
            )

    def touch(self, id_hash: str, now: float) -> None:
        with self.db.transaction() as tx:
            tx.execute("UPDATE sessions SET last_seen_at = ? WHERE id_hash = ?", (now, id_hash))

    def revoke(self, id_hash: str, now: float) -> None:
        with self.db.transaction() as tx:
            tx.execute("UPDATE sessions SET revoked_at = ? WHERE id_hash = ? AND revoked_at IS NULL", (now, id_hash))

    def revoke_user(self, user_id: str, now: float) -> None:
        with self.db.transaction() as tx:
            tx.execute("UPDATE sessions SET revoked_at = ? WHERE user_id = ? AND revoked_at IS NULL", (now, user_id))

    def role(self, user_id: str, org_id: str) -> str | None:
        with self.db.transaction(write=False) as tx:
            row = tx.one("SELECT role FROM memberships WHERE user_id = ? AND organization_id = ?", (user_id, org_id))
        return row["role"] if row else None

    def first_organization(self, user_id: str) -> str | None:
        with self.db.transaction(write=False) as tx:
            row = tx.one("SELECT organization_id FROM memberships WHERE user_id = ? ORDER BY created_at, id LIMIT 1", (user_id,))
        return row["organization_id"] if row else None


class SessionService:
    """Creates, validates, rotates and revokes sessions; implements the API's `Authenticator`."""

    TOUCH_EVERY = 60.0  # seconds; keeps reads from writing on every request

    def __init__(self, store: SessionStore, clock: Clock, idle_seconds: int, absolute_seconds: int, trust_proxy: bool) -> None:
        self.store = store
        self.clock = clock
        self.idle = idle_seconds
        self.absolute = absolute_seconds
        self.trust_proxy = trust_proxy

    def start(self, user_id: str, org_id: str | None) -> tuple[str, str]:
        """A new session (fresh id and CSRF token); returns (session_id, csrf_token)."""
        session_id = secrets.token_urlsafe(32)
        csrf = secrets.token_urlsafe(24)
        now = self.clock.now()
        role = self.store.role(user_id, org_id) if org_id else None
        self.store.insert(session_id, user_id, org_id, csrf, role, now, now + self.absolute)
        return session_id, csrf

    def rotate(self, auth: AuthContext, org_id: str | None) -> tuple[str, str]:
        """Replace the caller's session (privilege change): the old id stops working at once."""
        self.store.revoke(auth.session_hash, self.clock.now())
        return self.start(auth.user_id, org_id)

    def revoke(self, auth: AuthContext) -> None:
        self.store.revoke(auth.session_hash, self.clock.now())

    def authenticate(self, request: bottle.BaseRequest) -> AuthContext | None:
        cached = request.environ.get("concierge.auth", False)
        if cached is not False:
            return cached
        auth = self._authenticate(request)
        request.environ["concierge.auth"] = auth
        return auth

    def _authenticate(self, request: bottle.BaseRequest) -> AuthContext | None:
        session_id = _cookie(request.environ.get("HTTP_COOKIE", ""), COOKIE)
        via_cookie = True
        header = request.headers.get("Authorization", "")
        if header.startswith("Bearer "):
            session_id, via_cookie = header[7:].strip(), False
        if not session_id or len(session_id) > 128:
            return None
        row = self.store.lookup(session_id)
        now = self.clock.now()
        if row is None or row["expires_at"] <= now or row["last_seen_at"] + self.idle <= now:
            return None
        if now - row["last_seen_at"] > self.TOUCH_EVERY:
            self.store.touch(row["id_hash"], now)
        return AuthContext(
            user_id=row["user_id"],
            organization_id=row["organization_id"],
            session_hash=row["id_hash"],
            csrf_token=row["csrf_token"],
            role_seen=row["role_seen"],
            via_cookie=via_cookie,
            user={"id": row["user_id"], "email": row["email"], "name": row["name"]},
            member_role=row["member_role"],
            member_role_loaded=True,
        )

    def resolve_role(self, auth: AuthContext) -> str | None:
        """The caller's role in the active organization, looked up once per request.

        When it differs from the role the session was issued for (an admin changed it), a cookie session
        moves to a new id on this response: privileges never change under an old session id.
        """
        if not auth.resolved:
            if auth.member_role_loaded:
                auth.role = auth.member_role if auth.organization_id else None
            else:
                auth.role = self.store.role(auth.user_id, auth.organization_id) if auth.organization_id else None
            auth.resolved = True
            if auth.role != auth.role_seen and auth.via_cookie:
                session_id = secrets.token_urlsafe(32)
                self.store.rotate(auth.session_hash, session_id, auth.role, self.clock.now())
                auth.session_hash, auth.role_seen = hashlib.sha256(session_id.encode()).hexdigest(), auth.role
                self.set_cookie(bottle.request, bottle.response, session_id, auth.csrf_token)
                log.info("session rotated on role change user=%s role=%s", auth.user_id, auth.role)
        return auth.role

    def secure_cookie(self, request: bottle.BaseRequest) -> bool:
        if request.environ.get("wsgi.url_scheme") == "https":
            return True
        return self.trust_proxy and request.headers.get("X-Forwarded-Proto", "").lower() == "https"

    def set_cookie(self, request: bottle.BaseRequest, response: bottle.BaseResponse, session_id: str, csrf: str) -> None:
        secure = self.secure_cookie(request)
        response.set_cookie(COOKIE, session_id, path="/", httponly=True, samesite="lax", secure=secure, max_age=self.absolute)
        response.set_cookie(CSRF_COOKIE, csrf, path="/", samesite="lax", secure=secure, max_age=self.absolute)

    def clear_cookie(self, request: bottle.BaseRequest, response: bottle.BaseResponse) -> None:
        secure = self.secure_cookie(request)
        response.set_cookie(COOKIE, "", path="/", httponly=True, samesite="lax", secure=secure, max_age=0)
        response.set_cookie(CSRF_COOKIE, "", path="/", samesite="lax", secure=secure, max_age=0)
