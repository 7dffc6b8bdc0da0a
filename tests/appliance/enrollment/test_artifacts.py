"""POST /api/v1/artifacts: deploy token, multipart upload, sha256 check, atomic placement, size limit."""

from __future__ import annotations

import hashlib
import io
import json
import socket
import ssl
import uuid
from collections.abc import Iterator

import pytest

from appliance.artifacts import ArtifactStore, UploadPart, UploadRefused, publish_upload
from tests.conftest import RunningAppliance, start_appliance
from tests.polling import wait_for

DEPLOY = "deploy-" + "x" * 32


def multipart(files: list[tuple[str, bytes]], fields: dict[str, str] | None = None) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    out = bytearray()
    for key, value in (fields or {}).items():
        out += f'--{boundary}\r\nContent-Disposition: form-data; name="{key}"\r\n\r\n{value}\r\n'.encode()
    for name, data in files:
        out += (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
                "Content-Type: application/octet-stream\r\n\r\n").encode() + data + b"\r\n"
    out += f"--{boundary}--\r\n".encode()
    return bytes(out), f"multipart/form-data; boundary={boundary}"


def upload(appliance: RunningAppliance, files, fields=None, token: str | None = DEPLOY) -> tuple[int, object]:
    body, ctype = multipart(files, fields)
    return appliance.rest.call("POST", "/api/v1/artifacts", raw=body, token=token, headers={"Content-Type": ctype})


@pytest.fixture
def deployable(tmp_path, monkeypatch) -> Iterator[RunningAppliance]:
    monkeypatch.delenv("SENSOR_ADMIN_TOKEN", raising=False)
    monkeypatch.setenv("SENSOR_DEPLOY_TOKEN", DEPLOY)
    running = start_appliance(tmp_path, artifacts={"max_upload_bytes": 64 * 1024})
    try:
        yield running
    finally:
        running.app.stop()


def leftovers(appliance: RunningAppliance) -> list[str]:
    return [str(p) for p in (appliance.tmp / "static").rglob("*") if p.name.startswith(".")]


def test_upload_is_refused_while_the_deploy_token_is_unset(appliance):
    status, body = upload(appliance, [("agents/linux-amd64/sensor-agent", b"x")], token="anything")
    assert status == 403 and "SENSOR_DEPLOY_TOKEN" in body["error"]


def test_upload_needs_the_deploy_token(deployable):
    files = [("agents/linux-amd64/sensor-agent", b"x")]
    assert upload(deployable, files, token=None)[0] == 401
    assert upload(deployable, files, token="wrong")[0] == 401
    assert upload(deployable, files, token=deployable.app.admin_token)[0] == 401  # admin is not deploy
    assert upload(deployable, files, token=DEPLOY + "x")[0] == 401
    assert not (deployable.tmp / "static" / "agents").exists()


def test_upload_places_files_checks_sha256_and_updates_the_manifest(deployable):
    agent, driver = b"\x7fELF agent" * 100, b"driver inf"
    status, body = upload(deployable, [("agents/linux-amd64/sensor-agent", agent), ("driver/sensor-driver.inf", driver)], {
        "sha256:agents/linux-amd64/sensor-agent": hashlib.sha256(agent).hexdigest(),
        "sha256:driver/sensor-driver.inf": hashlib.sha256(driver).hexdigest().upper(),
        "version": "2.1.0",
    })
    assert status == 200, body
    assert body["count"] == 2 and {f["version"] for f in body["files"]} == {"2.1.0"}
    assert deployable.rest.get("/static/agents/linux-amd64/sensor-agent", token=None) == (200, agent)
    manifest = deployable.rest.get("/static/manifest.json", token=None)[1]
    files = {f["name"]: f for f in manifest["files"]}
    assert files["agents/linux-amd64/sensor-agent"]["sha256"] == hashlib.sha256(agent).hexdigest()
    assert files["driver/sensor-driver.inf"]["size"] == len(driver)
    assert leftovers(deployable) == []
    # A second upload replaces the file.
    status, _ = upload(deployable, [("agents/linux-amd64/sensor-agent", b"v2")], {"sha256": hashlib.sha256(b"v2").hexdigest()})
    assert status == 200
    assert deployable.rest.get("/static/agents/linux-amd64/sensor-agent", token=None) == (200, b"v2")


def test_a_checksum_mismatch_stores_nothing_of_the_whole_request(deployable):
    good, bad = b"good file", b"bad file"
    status, body = upload(deployable, [("a/good.bin", good), ("a/bad.bin", bad)], {
        "sha256:a/good.bin": hashlib.sha256(good).hexdigest(),
        "sha256:a/bad.bin": hashlib.sha256(b"something else").hexdigest(),
    })
    assert status == 422 and body["code"] == "checksum_mismatch"
    assert not (deployable.tmp / "static" / "a" / "good.bin").exists()
    assert not (deployable.tmp / "static" / "a" / "bad.bin").exists()
    assert leftovers(deployable) == []


def _send_head(appliance: RunningAppliance, head: str, body: bytes = b"") -> bytes:
    """Send a raw request over TLS and return the reply (the server may answer before the body)."""
    context = ssl.create_default_context(cafile=str(appliance.app.ca.ca_cert_path))
    with socket.create_connection(("127.0.0.1", appliance.app.rest_port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            tls.sendall(head.encode() + body)
            reply = b""
            while chunk := tls.recv(65536):
                reply += chunk
            return reply


def test_an_oversized_upload_answers_413_before_reading_the_body(deployable):
    body, ctype = multipart([("big.bin", b"\0" * (65 * 1024))])
    head = (f"POST /api/v1/artifacts HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {DEPLOY}\r\n"
            f"Content-Type: {ctype}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n")
    reply = _send_head(deployable, head)  # headers only: the refusal must not wait for 65 KiB
    assert reply.startswith(b"HTTP/1.1 413 ")
    assert b'"error"' in reply
    assert not (deployable.tmp / "static" / "big.bin").exists()


def test_an_upload_without_content_length_answers_411(deployable):
    head = (f"POST /api/v1/artifacts HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {DEPLOY}\r\n"
            "Content-Type: multipart/form-data; boundary=x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
    reply = _send_head(deployable, head, b"0\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 411 ")


@pytest.mark.parametrize("name", ["../escape.bin", "/etc/cron.d/x", "a/../../x", "manifest.json", "agent.key",
                                  ".hidden", "a//b", "a\\..\\b", "dir/", "", "ca.pem"])
def test_hostile_target_names_are_refused(deployable, name):
    status, body = upload(deployable, [(name, b"payload")])
    assert status in (422, 400), (name, status, body)
    assert not (deployable.tmp / "escape.bin").exists()
    assert leftovers(deployable) == []


def test_a_symlinked_directory_cannot_carry_an_upload_out(deployable, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (deployable.tmp / "static" / "out").symlink_to(outside)
    status, _ = upload(deployable, [("out/x.bin", b"payload")])
    assert status == 422
    assert list(outside.iterdir()) == []


def test_a_broken_upload_never_leaves_a_half_file(deployable):
    body, ctype = multipart([("agents/linux-amd64/sensor-agent", b"A" * 40_000)])
    context = ssl.create_default_context(cafile=str(deployable.app.ca.ca_cert_path))
    head = (f"POST /api/v1/artifacts HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {DEPLOY}\r\n"
            f"Content-Type: {ctype}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n")
    with socket.create_connection(("127.0.0.1", deployable.app.rest_port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            tls.sendall(head.encode() + body[: len(body) // 2])  # then the client goes away
    # The handshake above opened the connection on the server: wait until the server has noticed the cut and
    # closed it (the test's own requests are done and closed by then), rather than a fixed sleep.
    assert wait_for(lambda: deployable.app.rest_stats()["open_connections"] == 0, timeout=15), deployable.app.rest_stats()
    status, manifest = deployable.rest.get("/static/manifest.json", token=None)
    assert "agents/linux-amd64/sensor-agent" not in {f["name"] for f in manifest["files"]}
    assert not (deployable.tmp / "static" / "agents" / "linux-amd64" / "sensor-agent").exists()
    assert leftovers(deployable) == []


def test_upload_needs_multipart_and_a_file(deployable):
    status, _ = deployable.rest.call("POST", "/api/v1/artifacts", raw=json.dumps({"a": 1}).encode(), token=DEPLOY)
    assert status == 415
    status, body = upload(deployable, [], {"sha256": "0" * 64})
    assert status == 422 and body["field"] == "file"
    status, body = upload(deployable, [("x.bin", b"x")], {"sha256": "nothex"})
    assert status == 422


@pytest.mark.parametrize("files, fields, field, reason", [
    ([("ca.pem", b"forged")], {}, "file", "own CA certificate"),
    ([("a.bin", b"1"), ("a.bin", b"2")], {}, "file", "appears twice"),
    ([("a.bin", b"1")], {"sha256:b.bin": "0" * 64}, "sha256:b.bin", "must name an uploaded file"),
    ([("a.bin", b"1"), ("b.bin", b"2")], {"sha256": "0" * 64}, "sha256", "sha256:<name> for each"),
])
def test_upload_form_rules_answer_422_naming_the_field_and_store_nothing(deployable, files, fields, field, reason):
    ca_before = (deployable.tmp / "static" / "ca.pem").read_bytes()
    status, body = upload(deployable, files, fields)
    assert status == 422 and body["field"] == field and reason in body["error"], body
    assert not (deployable.tmp / "static" / "a.bin").exists() and leftovers(deployable) == []
    assert (deployable.tmp / "static" / "ca.pem").read_bytes() == ca_before


def test_the_upload_rules_live_with_the_store_not_the_route(tmp_path):
    """publish_upload is the whole upload (form rules, staging, one commit) without HTTP: a part under another
    form name is refused before anything is staged; a good pair lands together in the manifest."""
    store = ArtifactStore(tmp_path / "static", 1024)
    with pytest.raises(UploadRefused) as refused:
        publish_upload(store, [UploadPart("upload", "a.bin", io.BytesIO(b"1"))], {})
    assert refused.value.field == "file" and list((tmp_path / "static").rglob("*")) == []
    parts = [UploadPart("file", "a.bin", io.BytesIO(b"1")), UploadPart("file", "d/b.bin", io.BytesIO(b"22"))]
    sha = hashlib.sha256(b"22").hexdigest()
    entries = publish_upload(store, parts, {"sha256:d/b.bin": sha, "version": "1.2.3"})
    assert {(e.name, e.size, e.version) for e in entries} == {("a.bin", 1, "1.2.3"), ("d/b.bin", 2, "1.2.3")}
    assert {f["name"] for f in json.loads((tmp_path / "static" / "manifest.json").read_text())["files"]} >= {"a.bin", "d/b.bin"}
