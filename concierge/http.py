"""The HTTP edge: request ids, CORS, the error renderer (one JSON shape), and the cheroot server."""

from __future__ import annotations

import itertools
import json
import logging
import re
import secrets
import threading
from typing import Any, Callable, Iterable

import bottle
from cheroot import wsgi

from concierge.errors import ConciergeError, ServiceUnavailable, UpstreamError

log = logging.getLogger(__name__)

REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{8,64}$")
ALLOWED_HEADERS = "Content-Type, Idempotency-Key, X-CSRF-Token, Last-Event-ID, X-Request-Id, Authorization"
ALLOWED_METHODS = "GET, POST, PUT, PATCH, DELETE, OPTIONS"


def _json(body: dict[str, Any]) -> str:
    return json.dumps(body, separators=(",", ":"))


class ErrorPlugin:
    """Outermost Bottle plugin: renders ConciergeError subclasses, and logs anything else as a 500."""

    name = "errors"
    api = 2

    def apply(self, callback: Callable[..., Any], route: bottle.Route) -> Callable[..., Any]:
        def wrapper(**kwargs: Any) -> Any:
            try:
                return callback(**kwargs)
            except bottle.HTTPResponse:
                raise
            except UpstreamError as err:  # details go to the log, not to the client
                rid = bottle.request.environ.get("concierge.request_id", "-")
                log.warning("upstream failure request_id=%s path=%s error=%s", rid, bottle.request.path, err)
                return render(UpstreamError(UpstreamError.message + ", retry later"))
            except ConciergeError as err:
                return render(err)
            except Exception:
                rid = bottle.request.environ.get("concierge.request_id", "-")
                log.exception("unhandled error request_id=%s method=%s path=%s", rid, bottle.request.method, bottle.request.path)
                return render(ConciergeError())

        return wrapper


def render(err: ConciergeError) -> str:
    resp = bottle.response
    resp.status = err.status
    resp.content_type = "application/json"
    if isinstance(err, ServiceUnavailable):
        resp.set_header("Retry-After", str(err.retry_after))
    if err.status == 401:
        resp.set_header("WWW-Authenticate", 'Cookie realm="concierge"')
    return _json(err.body())


def default_error_handler(res: bottle.HTTPError) -> str:
    """Bottle's own errors (no route, wrong method, body too large) in our shape."""
    messages = {404: "Not found", 405: "Method not allowed", 413: "Request body too large"}
    status = res.status_code
    if status >= 500:
        rid = bottle.request.environ.get("concierge.request_id", "-")
        log.error("unhandled error request_id=%s path=%s error=%r", rid, bottle.request.path, res.exception, exc_info=res.exception)
    bottle.response.content_type = "application/json"
    return _json({"error": messages.get(status, "Internal server error" if status >= 500 else res.body or "Error")})


class Edge:
    """WSGI middleware: assigns the request id (header both ways) and applies CORS to every response."""

    def __init__(self, app: Callable[..., Iterable[bytes]], cors_origins: Iterable[str], trust_proxy: bool) -> None:
        self.app = app
        self.origins = frozenset(cors_origins)
        self.trust_proxy = trust_proxy
        # ids only need to be unique, not secret: a random process prefix and a counter (no syscall per request)
        self._id_prefix = secrets.token_hex(4)
        self._id_counter = itertools.count(1)

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        incoming = environ.get("HTTP_X_REQUEST_ID", "")
        rid = incoming if REQUEST_ID.match(incoming) else f"{self._id_prefix}{next(self._id_counter):08x}"
        environ["concierge.request_id"] = rid
        if self.trust_proxy:
            forwarded = environ.get("HTTP_X_FORWARDED_PROTO", "")
            if forwarded in ("http", "https"):
                environ["wsgi.url_scheme"] = forwarded
        origin = environ.get("HTTP_ORIGIN", "")
        allowed = origin in self.origins
        if environ["REQUEST_METHOD"] == "OPTIONS" and environ.get("HTTP_ACCESS_CONTROL_REQUEST_METHOD"):
            if not allowed:
                start_response("403 Forbidden", [("Content-Type", "application/json"), ("X-Request-Id", rid), ("Vary", "Origin")])
                return [_json({"error": "Origin not allowed"}).encode()]
            headers = [
                ("Access-Control-Allow-Origin", origin),
                ("Access-Control-Allow-Credentials", "true"),
                ("Access-Control-Allow-Methods", ALLOWED_METHODS),
                ("Access-Control-Allow-Headers", ALLOWED_HEADERS),
                ("Access-Control-Max-Age", "600"),
                ("Vary", "Origin"),
                ("X-Request-Id", rid),
            ]
            start_response("204 No Content", headers)
            return [b""]

        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            headers = [*headers, ("X-Request-Id", rid), ("Vary", "Origin")]
            if allowed:
                headers += [
                    ("Access-Control-Allow-Origin", origin),
                    ("Access-Control-Allow-Credentials", "true"),
                    ("Access-Control-Expose-Headers", "X-Request-Id, Retry-After"),
                ]
            return start_response(status, headers, exc_info) if exc_info else start_response(status, headers)

        return self.app(environ, start)


class Server:
    """cheroot on a (host, port); port 0 picks a free one. `start()` returns the bound port."""

    def __init__(self, app: Callable[..., Any], host: str, port: int, threads: int) -> None:
        self.httpd = wsgi.Server((host, port), app, numthreads=threads, max=threads, request_queue_size=256, shutdown_timeout=2, timeout=30)
        self.httpd.server_name = "concierge"
        self._thread: threading.Thread | None = None

    def start(self) -> int:
        self.httpd.prepare()
        self._thread = threading.Thread(target=self.httpd.serve, name="cheroot", daemon=True)
        self._thread.start()
        return self.port

    @property
    def port(self) -> int:
        return int(self.httpd.bind_addr[1])

    def serve_forever(self) -> None:
        self.httpd.safe_start()

    def stop(self) -> None:
        self.httpd.stop()
        if self._thread is not None:
            self._thread.join(timeout=10)
