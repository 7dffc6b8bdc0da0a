"""The dashboard's HTTP surface: /auth (accounts and sessions), /api/v1 (the proxy), and the web app.

Every reply is JSON in the appliance's error shape or a static file; every mutation needs the
session's CSRF token; the appliance's admin token is added by the proxy and never sent back.
"""

from __future__ import annotations

import hmac
import json
import logging
import mimetypes
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import bottle
from pydantic import BaseModel, ConfigDict, Field

from appliance.dashboard import roles
from appliance.dashboard.accounts import AccountError, UserStore
from appliance.dashboard.proxy import ApplianceClient, UpstreamUnavailable
from appliance.dashboard.ratelimit import SignInLimiter
from appliance.dashboard.sessions import Session, SessionStore
from appliance.errors import ApiError
from appliance.rest.api import json_response, json_response_error, parse_model, read_json

log = logging.getLogger(__name__)

COOKIE = "console_session"
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
       "form-action 'self'")
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
    "Strict-Transport-Security": "max-age=31536000",
}
MUTATIONS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# A proxied path: segments of safe characters, never "." or ".." (no traversal past the role check).
SAFE_PATH = re.compile(r"^/api/v1(/[A-Za-z0-9_~:@!$&'()*+,;=%-][A-Za-z0-9._~:@!$&'()*+,;=%-]*)*/?$")
SAFE_QUERY = re.compile(r"^[\x21-\x7e]*$")
MAX_QUERY = 8192


class RateLimited(ApiError):
    """Too many failed sign-ins for this account or address; answered 429 with Retry-After."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(429, f"Too many failed attempts; try again in {retry_after} s", code="rate_limited")
        self.retry_after = retry_after


class LoginBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    username: str = Field(min_length=1, max_length=64)
    password: str = Field(min_length=1, max_length=256)


class PasswordBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    current: str = Field(min_length=1, max_length=256)
    new: str = Field(max_length=1024)


class NewUserBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    username: str = Field(max_length=256)
    password: str = Field(max_length=1024)
    role: Literal["admin", "analyst"]


class UserPatchBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    disabled: bool | None = None
    role: Literal["admin", "analyst"] | None = None


class Counters:
    """What the dashboard refused and why (logged on shutdown, exposed to tests)."""

    def __init__(self) -> None:
        self.by_reason: dict[str, int] = {}

    def count(self, reason: str) -> None:
        self.by_reason[reason] = self.by_reason.get(reason, 0) + 1


def user_view(user: Any) -> dict[str, Any]:
    return {"username": user.username, "role": user.role, "disabled": user.disabled,
            "created_at": user.created_at, "last_login": user.last_login}


class DashboardWeb:
    """Builds the Bottle app; every collaborator comes in through the constructor."""

    def __init__(self, users: UserStore, sessions: SessionStore, limiter: SignInLimiter, upstream: ApplianceClient,
                 dist_dir: Path, max_body_bytes: int) -> None:
        self.users = users
        self.sessions = sessions
        self.limiter = limiter
        self.upstream = upstream
        self.dist_dir = dist_dir.resolve()
        self.max_body_bytes = max_body_bytes
        self.counters = Counters()
        self.app = bottle.Bottle(catchall=True)
        self.app.config["json.enable"] = False
        self.app.default_error_handler = self._bottle_error  # type: ignore[method-assign]
        self.app.add_hook("after_request", self._security_headers)
        self._routes()

    # -- plumbing -----------------------------------------------------------------------------
    @staticmethod
    def _security_headers() -> None:
        for name, value in SECURITY_HEADERS.items():
            if name == "Cache-Control" and bottle.response.get_header("Cache-Control"):
                continue
            bottle.response.set_header(name, value)

    def _bottle_error(self, res: bottle.HTTPError) -> str:
        bottle.response.content_type = "application/json"
        self._security_headers()
        reasons = {404: "Not found", 405: "Method not allowed", 413: "Request body too large"}
        if res.status_code >= 500:
            log.error("unhandled error: %r", res.exception)
        return json.dumps({"error": reasons.get(res.status_code, "Error")})

    def _guard(self, handler: Callable[..., Any]) -> Callable[..., Any]:
        """One error shape: ApiError rendered, anything else logged and answered 500."""
        def callback(**kw: Any) -> Any:
            try:
                result = handler(**kw)
            except ApiError as err:
                self.counters.count(err.code or str(err.status))
                response = json_response_error(err)
                if isinstance(err, RateLimited):
                    response.set_header("Retry-After", str(err.retry_after))
                return response
            except bottle.HTTPResponse:
                raise
            except Exception:
                log.exception("unhandled error in %s %s", bottle.request.method, bottle.request.path)
                return json_response_error(ApiError(500, "Internal server error"))
            if isinstance(result, bottle.HTTPResponse):
                return result
            return json_response(result)
        return callback

    def _json_body(self, model: type[BaseModel]) -> Any:
        ctype = bottle.request.environ.get("CONTENT_TYPE", "")
        if ctype.split(";")[0].strip().lower() != "application/json":
            raise ApiError(415, "Content-Type must be application/json", code="unsupported_media_type")
        try:
            data = read_json(self.max_body_bytes)
        except ApiError as err:
            err.code = err.code or {413: "too_large", 400: "bad_json"}.get(err.status)
            raise
        try:
            return parse_model(model, data)
        except ApiError as err:
            err.code = "invalid"
            raise

    def _session_id(self) -> str:
        raw = bottle.request.environ.get("HTTP_COOKIE", "")
        for part in raw.split(";"):
            name, _, value = part.strip().partition("=")
            if name == COOKIE:
                return value
        return ""

    def _session(self) -> Session:
        session = self.sessions.get(self._session_id())
        if session is None:
            raise ApiError(401, "Sign in first (no session, or it expired)", code="unauthenticated")
        return session

    def _check_csrf(self, session: Session) -> None:
        presented = bottle.request.environ.get("HTTP_X_CSRF_TOKEN", "")
        if not presented or not hmac.compare_digest(presented.encode("utf-8", "surrogateescape"), session.csrf.encode()):
            raise ApiError(403, "Missing or wrong X-CSRF-Token header", code="csrf")

    def _authorised(self, mutation: bool) -> Session:
        session = self._session()
        if mutation:
            self._check_csrf(session)
        return session

    @staticmethod
    def _require_admin(session: Session, what: str) -> None:
        if session.role != "admin":
            raise ApiError(403, f"your role ({session.role}) cannot {what}", code="forbidden")

    @staticmethod
    def _cookie(value: str, max_age: int | None = None) -> str:
        cookie = f"{COOKIE}={value}; HttpOnly; Secure; SameSite=Strict; Path=/"
        if max_age is not None:
            cookie += f"; Max-Age={max_age}"
        return cookie

    @staticmethod
    def _account_error(err: AccountError) -> ApiError:
        status = 409 if err.code == "exists" else 422
        fields = {err.field: str(err).split(": ", 1)[-1]} if err.field else None
        return ApiError(status, str(err), code=err.code or "invalid", field=err.field, fields=fields)

    # -- routes -------------------------------------------------------------------------------
    def _routes(self) -> None:
        route = self.app.route
        route("/auth/login", "POST", self._guard(self.login))
        route("/auth/logout", "POST", self._guard(self.logout))
        route("/auth/me", "GET", self._guard(self.me))
        route("/auth/password", "POST", self._guard(self.change_password))
        route("/auth/users", "GET", self._guard(self.list_users))
        route("/auth/users", "POST", self._guard(self.create_user))
        route("/auth/users/<username>", "PATCH", self._guard(self.update_user))
        route("/auth/metrics", "GET", self._guard(self.metrics))
        route("/api/<path:path>", ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"], self._guard(self.proxy))
        route("/auth/<path:path>", ["GET", "POST", "PUT", "PATCH", "DELETE"], self._guard(self.no_route))
        route("/", "GET", self.static)
        route("/<path:path>", "GET", self.static)

    def no_route(self, path: str) -> None:
        raise ApiError(404, "Not found")

    def login(self) -> bottle.HTTPResponse:
        body: LoginBody = self._json_body(LoginBody)
        address = bottle.request.environ.get("REMOTE_ADDR", "?")
        wait = self.limiter.retry_after(body.username, address)
        if wait:
            log.warning("sign-in rate limited user=%r address=%s", body.username[:64], address)
            raise RateLimited(wait)
        user = self.users.authenticate(body.username, body.password)
        if user is None:
            self.limiter.failed(body.username, address)
            log.info("sign-in failed user=%r address=%s", body.username[:64], address)
            raise ApiError(401, "wrong username or password", code="unauthenticated")
        self.limiter.succeeded(body.username)
        old = self._session_id()
        if old:
            self.sessions.end(old)  # a fresh id on every sign-in: a planted cookie is never promoted
        session_id, session = self.sessions.create(user.username, user.role)
        log.info("sign-in user=%s role=%s address=%s", user.username, user.role, address)
        response = json_response({"user": user.public(), "csrfToken": session.csrf})
        response.set_header("Set-Cookie", self._cookie(session_id))
        return response

    def logout(self) -> bottle.HTTPResponse:
        self._authorised(mutation=True)
        self.sessions.end(self._session_id())
        response = json_response({})
        response.set_header("Set-Cookie", self._cookie("", max_age=0))
        return response

    def me(self) -> dict[str, Any]:
        session = self._session()
        return {"user": {"username": session.username, "role": session.role}, "csrfToken": session.csrf}

    def change_password(self) -> dict[str, Any]:
        session = self._authorised(mutation=True)
        body: PasswordBody = self._json_body(PasswordBody)
        address = bottle.request.environ.get("REMOTE_ADDR", "?")
        wait = self.limiter.retry_after(session.username, address)
        if wait:
            raise RateLimited(wait)
        if self.users.authenticate(session.username, body.current) is None:
            self.limiter.failed(session.username, address)
            raise ApiError(403, "the current password is wrong", code="forbidden", field="current",
                           fields={"current": "wrong password"})
        try:
            self.users.set_password(session.username, body.new)
        except AccountError as err:
            raise self._account_error(err) from err
        self.sessions.end_user(session.username, keep=self._session_id())
        log.info("password changed user=%s", session.username)
        return {}

    def list_users(self) -> dict[str, Any]:
        session = self._session()
        self._require_admin(session, "list users")
        return {"users": [user_view(u) for u in self.users.all()]}

    def create_user(self) -> bottle.HTTPResponse:
        session = self._authorised(mutation=True)
        self._require_admin(session, "create users")
        body: NewUserBody = self._json_body(NewUserBody)
        try:
            user = self.users.create(body.username, body.password, body.role)
        except AccountError as err:
            raise self._account_error(err) from err
        log.info("user created user=%s role=%s by=%s", user.username, user.role, session.username)
        return json_response({"user": user_view(user)}, status=201)

    def update_user(self, username: str) -> dict[str, Any]:
        session = self._authorised(mutation=True)
        self._require_admin(session, "change users")
        body: UserPatchBody = self._json_body(UserPatchBody)
        if self.users.get(username) is None:
            raise ApiError(404, f"No user {username[:64]!r}")
        if username == session.username and (body.disabled or body.role == "analyst"):
            raise ApiError(422, "you cannot disable or demote yourself", code="invalid", field="disabled",
                           fields={"disabled": "you cannot disable or demote yourself"})
        user = self.users.update(username, disabled=body.disabled, role=body.role)
        if body.disabled or body.role is not None:
            self.sessions.end_user(username)
        log.info("user changed user=%s disabled=%s role=%s by=%s", username, body.disabled, body.role, session.username)
        return {"user": user_view(user)}

    def metrics(self) -> dict[str, Any]:
        """What the console refused and why, for admins (the appliance's own counters are /api/v1/metrics)."""
        self._require_admin(self._session(), "read the console's counters")
        return {"refused_by_reason": dict(self.counters.by_reason), "sessions": len(self.sessions),
                "sign_ins_rate_limited": self.limiter.refused, "upstream_failures": self.upstream.failures}

    def proxy(self, path: str) -> bottle.HTTPResponse:
        method = bottle.request.method
        session = self._authorised(mutation=method in MUTATIONS)
        full = "/api/" + path
        if not SAFE_PATH.match(full) or "%" in path:
            raise ApiError(400, "Bad request path", code="bad_path")
        if not roles.allowed(session.role, method, full):
            raise ApiError(403, f"your role ({session.role}) cannot {method} {full[:200]}", code="forbidden")
        query = bottle.request.environ.get("QUERY_STRING", "")
        if len(query) > MAX_QUERY or not SAFE_QUERY.match(query):
            raise ApiError(400, "Bad query string", code="bad_query")
        body = None
        ctype = None
        if method in MUTATIONS:
            length = bottle.request.content_length
            if length > self.max_body_bytes:
                raise ApiError(413, f"Request body too large (limit {self.max_body_bytes} bytes)", code="too_large")
            body = bottle.request.body.read(self.max_body_bytes + 1)
            if len(body) > self.max_body_bytes:
                raise ApiError(413, f"Request body too large (limit {self.max_body_bytes} bytes)", code="too_large")
            if body:
                ctype = bottle.request.environ.get("CONTENT_TYPE", "")
                if ctype.split(";")[0].strip().lower() != "application/json":
                    raise ApiError(415, "Content-Type must be application/json", code="unsupported_media_type")
        try:
            reply = self.upstream.forward(method, full, query, body, ctype, session.username)
        except UpstreamUnavailable:
            raise ApiError(502, "The appliance is not answering; retrying", code="upstream_unavailable") from None
        response = bottle.HTTPResponse(reply.body, status=reply.status)
        for name, value in reply.headers.items():
            response.set_header(name, value)
        return response

    def static(self, path: str = "") -> bottle.HTTPResponse:
        index = self.dist_dir / "index.html"
        if not index.is_file():
            response = json_response({"error": "The console is not built: run `make console`", "code": "not_built"}, 503)
            return response
        if path.startswith("api/") or path.startswith("auth/"):
            return json_response({"error": "Not found"}, 404)
        target = (self.dist_dir / path).resolve() if path else index
        if path and (not target.is_relative_to(self.dist_dir) or not target.is_file()):
            if path.startswith("assets/"):
                return json_response({"error": "Not found"}, 404)
            target = index  # client-side routes (/alerts, /rules/...) get the app
        mimetype = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        response = bottle.static_file(target.name, root=str(target.parent), mimetype=mimetype)
        if target.parent.name == "assets" and response.status_code == 200:
            response.set_header("Cache-Control", "public, max-age=31536000, immutable")
        return response
