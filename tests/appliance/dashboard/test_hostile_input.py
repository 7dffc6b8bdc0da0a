"""Hostile input on the console's own endpoints: each answered in the documented shape, the server keeps serving."""

from __future__ import annotations

import socket
import ssl
import time

import pytest

from appliance.dashboard.web import CSP


def _still_serving(console) -> dict:
    """The console answers and signs in; returns its refusal counters (admin-only /auth/metrics)."""
    assert console.browser().get("/auth/me")[0] == 401
    admin = console.admin()
    assert admin.get("/api/v1/metrics")[0] == 200
    status, counters = admin.get("/auth/metrics")
    assert status == 200
    return counters


@pytest.mark.parametrize("raw, status, code", [
    (b"{not json", 400, "bad_json"),
    (b"", 400, "bad_json"),
    (b"[1, 2]", 422, "invalid"),
    (b'{"username": "admin"}', 422, "invalid"),
    (b'{"username": 1, "password": 2}', 422, "invalid"),
    (b'{"username": "a", "password": NaN}', 400, "bad_json"),
    (b"[" * 100_000 + b"]" * 100_000, 400, "bad_json"),  # nesting past the parser's recursion limit
    (b'{"username": "' + b"a" * 70 + b'", "password": "x"}', 422, "invalid"),
    (b'\xff\xfe{"username"}', 400, "bad_json"),
])
def test_malformed_sign_in_bodies(console, raw, status, code):
    got, body = console.browser().post("/auth/login", raw=raw)
    assert (got, body["code"]) == (status, code) and isinstance(body["error"], str)
    assert _still_serving(console)["refused_by_reason"][code] == 1


def _announce_body(console, path: str, length: int, cookie: str = "", csrf: str = "") -> bytes:
    """Send only the headers of a request announcing `length` body bytes; return the start of the reply."""
    context = ssl.create_default_context(cafile=str(console.appliance.app.ca.ca_cert_path))
    with context.wrap_socket(socket.create_connection(("127.0.0.1", console.dashboard.port), timeout=10),
                             server_hostname="localhost") as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                     f"Cookie: console_session={cookie}\r\nX-CSRF-Token: {csrf}\r\n"
                     f"Content-Length: {length}\r\n\r\n".encode())
        reply = b""
        while True:  # the server closes after refusing
            chunk = sock.recv(4096)
            if not chunk:
                break
            reply += chunk
        return reply


def test_oversized_body_is_413_without_reading_it(console):
    admin = console.admin()
    just_over = 1024 * 1024 + 10_000  # past the 1 MiB limit: our handler refuses from Content-Length alone
    for path, cookie, csrf in (("/api/v1/whitelist", admin.cookie, admin.csrf), ("/auth/login", "", "")):
        reply = _announce_body(console, path, just_over, cookie, csrf)
        assert reply.startswith(b"HTTP/1.1 413") and b'"code": "too_large"' in reply, reply[:300]
    # far larger: cheroot refuses it before any handler runs
    assert _announce_body(console, "/auth/login", 1 << 30).startswith(b"HTTP/1.1 413")
    assert console.appliance.rest.get("/api/v1/whitelist")[1]["count"] == 0
    _still_serving(console)


def test_wrong_content_type_is_415(console):
    browser = console.browser()
    status, body = browser.post("/auth/login", raw=b"username=admin&password=x",
                                headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert (status, body["code"]) == (415, "unsupported_media_type")
    admin = console.admin()
    status, body = admin.post("/api/v1/whitelist", raw=b"value=x", headers={"Content-Type": "text/plain"})
    assert (status, body["code"]) == (415, "unsupported_media_type")
    assert console.appliance.rest.get("/api/v1/whitelist")[1]["count"] == 0
    assert _still_serving(console)["refused_by_reason"]["unsupported_media_type"] == 2


def test_hostile_query_strings_and_headers(console):
    admin = console.admin()
    assert admin.get("/api/v1/alerts?" + "a=1&" * 3000)[1]["code"] == "bad_query"
    status, body = admin.get("/api/v1/alerts?status=New%27%20OR%201=1--")
    assert status == 422 and body["field"] == "status"
    status, body = admin.get("/api/v1/metrics", headers={"X-CSRF-Token": "\u00ff" * 10, "Cookie": "console_session=\u00e9"})
    assert status == 401
    _still_serving(console)


def test_silent_and_slow_clients_do_not_block_others(console):
    context = ssl.create_default_context(cafile=str(console.appliance.app.ca.ca_cert_path))
    silent = [socket.create_connection(("127.0.0.1", console.dashboard.port)) for _ in range(20)]
    slow = context.wrap_socket(socket.create_connection(("127.0.0.1", console.dashboard.port)), server_hostname="localhost")
    slow.sendall(b"POST /auth/login HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
    try:
        started = time.monotonic()
        _still_serving(console)
        assert time.monotonic() - started < 10
    finally:
        for sock in silent:
            sock.close()
        slow.close()


def test_static_app_has_strict_headers_and_no_traversal(console):
    browser = console.browser()
    status, body = browser.get("/")
    assert status == 200 and b"<title>console</title>" in body
    assert browser.last_headers["content-security-policy"] == CSP
    assert "'unsafe-eval'" not in CSP and "http:" not in CSP
    assert browser.last_headers["x-content-type-options"] == "nosniff"
    assert browser.get("/alerts/123")[1] == body  # client-side route
    status, _ = browser.get("/assets/app-1234.js")
    assert status == 200 and "immutable" in browser.last_headers["cache-control"]
    assert browser.get("/assets/missing.js")[0] == 404
    for path in ("/../state/admin.token", "/%2e%2e/state/admin.token", "/assets/..%2f..%2fstate%2fadmin.token"):
        status, body = browser.get(path)
        assert console.appliance.app.admin_token.encode() not in (body if isinstance(body, bytes) else str(body).encode())
