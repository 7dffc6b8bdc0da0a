"""GET /static: content types, caching headers, ranges, and no way out of the static directory."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
from io import BytesIO

import pytest

from tests.appliance.enrollment.conftest import AGENT_WINDOWS


def raw_get(appliance, path: str, headers: dict[str, str] | None = None, method: str = "GET") -> tuple[int, dict, bytes]:
    """A request whose path goes on the wire exactly as written (no client-side normalisation)."""
    conn = http.client.HTTPSConnection("localhost", appliance.app.rest_port, context=appliance.rest.context, timeout=10)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        for key, value in (headers or {}).items():
            conn.putheader(key, value)
        conn.endheaders()
        reply = conn.getresponse()
        return reply.status, {k.lower(): v for k, v in reply.getheaders()}, reply.read()
    finally:
        conn.close()


def test_static_serves_the_ca_certificate_with_type_etag_and_last_modified(enrolling):
    status, headers, body = raw_get(enrolling, "/static/ca.pem")
    assert status == 200 and body == enrolling.app.ca.ca_pem
    assert headers["content-type"] == "application/x-pem-file"
    assert headers["etag"].startswith('"') and headers["last-modified"].endswith("GMT")
    assert headers["x-content-type-options"] == "nosniff"
    status, _, body = raw_get(enrolling, "/static/ca.pem", {"If-None-Match": headers["etag"]})
    assert status == 304 and body == b""
    status, _, _ = raw_get(enrolling, "/static/ca.pem", {"If-Modified-Since": headers["last-modified"]})
    assert status == 304


def test_static_content_types_and_ranges(enrolling):
    status, headers, body = raw_get(enrolling, "/static/agents/windows-amd64/sensor-agent.exe")
    assert status == 200 and body == AGENT_WINDOWS
    assert headers["content-type"] == "application/vnd.microsoft.portable-executable"
    assert headers["accept-ranges"] == "bytes"
    status, headers, body = raw_get(enrolling, "/static/agents/windows-amd64/sensor-agent.exe", {"Range": "bytes=3-6"})
    assert status == 206 and body == AGENT_WINDOWS[3:7]
    assert headers["content-range"] == f"bytes 3-6/{len(AGENT_WINDOWS)}"
    status, headers, body = raw_get(enrolling, "/static/agents/windows-amd64/sensor-agent.exe", method="HEAD")
    assert status == 200 and body == b"" and int(headers["content-length"]) == len(AGENT_WINDOWS)
    status, _, _ = raw_get(enrolling, "/static/agents/windows-amd64/sensor-agent.exe", {"Range": "bytes=999-"})
    assert status == 416
    store = enrolling.app.artifacts
    for name, ctype in (("driver/sensor-driver.cat", "application/vnd.ms-pki.seccat"),
                        ("driver/sensor-driver.cer", "application/pkix-cert"),
                        ("driver/sensor-driver.sys", "application/octet-stream")):
        store.put(name, BytesIO(b"x"))
        assert raw_get(enrolling, f"/static/{name}")[1]["content-type"] == ctype


def test_manifest_lists_every_file_with_size_sha256_and_version(enrolling):
    status, headers, body = raw_get(enrolling, "/static/manifest.json")
    assert status == 200 and headers["content-type"].startswith("application/json")
    manifest = json.loads(body)
    files = {f["name"]: f for f in manifest["files"]}
    assert files["agents/windows-amd64/sensor-agent.exe"]["sha256"] == hashlib.sha256(AGENT_WINDOWS).hexdigest()
    assert files["agents/windows-amd64/sensor-agent.exe"]["size"] == len(AGENT_WINDOWS)
    assert files["agents/windows-amd64/sensor-agent.exe"]["version"] == "1.0.0"
    assert files["ca.pem"]["sha256"] == hashlib.sha256(enrolling.app.ca.ca_pem).hexdigest()
    assert "manifest.json" not in files


TRAVERSALS = [
    "/static/../certs/ca.key",
    "/static/../../etc/passwd",
    "/static/%2e%2e/certs/ca.key",
    "/static/%2e%2e%2fcerts%2fca.key",
    "/static/..%2f..%2fetc%2fpasswd",
    "/static/%252e%252e/certs/ca.key",
    "/static/agents/../../certs/server.key",
    "/static//etc/passwd",
    "/static/%2fetc%2fpasswd",
    "/static/..\\certs\\ca.key",
    "/static/..%5ccerts%5cca.key",
    "/static/ca.pem%00.txt",
    "/static/./ca.pem",
    "/static/",
    "/static/agents",
]


@pytest.mark.parametrize("path", TRAVERSALS)
def test_traversal_attempts_fail(enrolling, path):
    status, _, body = raw_get(enrolling, path)
    assert status in (400, 404), (path, status)
    assert b"PRIVATE KEY" not in body and b"root:" not in body


def test_symlinks_out_of_the_static_directory_are_not_followed(enrolling):
    static = enrolling.tmp / "static"
    os.symlink("/etc/passwd", static / "passwd")
    os.symlink(enrolling.tmp / "certs", static / "certs")
    os.symlink(enrolling.tmp / "certs" / "ca.pem", static / "ca-link.pem")
    os.symlink("agents/windows-amd64/sensor-agent.exe", static / "inside-link.exe")
    assert raw_get(enrolling, "/static/passwd")[0] == 404
    assert raw_get(enrolling, "/static/certs/ca.key")[0] == 404
    assert raw_get(enrolling, "/static/certs/ca.pem")[0] == 404
    assert raw_get(enrolling, "/static/ca-link.pem")[0] == 404
    assert raw_get(enrolling, "/static/inside-link.exe")[2] == AGENT_WINDOWS  # a link that stays inside is fine


def test_private_keys_are_never_served_by_name_or_by_content(enrolling):
    static = enrolling.tmp / "static"
    key = (enrolling.tmp / "certs" / "server.key").read_bytes()
    (static / "server.key").write_bytes(key)
    (static / "notes.txt").write_bytes(b"hello\n" + key)
    (static / "bundle.bin").write_bytes(b"\0" * (64 * 1024 - 15) + key)  # the marker straddles the first 64 KiB
    (static / "id_rsa.pem").write_bytes(b"-----BEGIN RSA PRIVATE KEY-----\nabc\n-----END RSA PRIVATE KEY-----\n")
    (static / ".hidden").write_bytes(b"temp")
    for name in ("server.key", "notes.txt", "bundle.bin", "id_rsa.pem", ".hidden"):
        status, _, body = raw_get(enrolling, f"/static/{name}")
        assert status == 404 and b"PRIVATE" not in body, name
    manifest = json.loads(raw_get(enrolling, "/static/manifest.json")[2])
    enrolling.app.artifacts.refresh()
    manifest = json.loads(raw_get(enrolling, "/static/manifest.json")[2])
    names = {f["name"] for f in manifest["files"]}
    assert not names & {"server.key", "notes.txt", "bundle.bin", "id_rsa.pem", ".hidden"}
