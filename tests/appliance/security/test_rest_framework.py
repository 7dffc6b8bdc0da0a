"""Item 8: JSON routes fed other media types, a NUL in an uploaded file name, clients that hang up early."""

from __future__ import annotations

import logging
import socket
import ssl
import struct

import pytest

from tests.appliance.enrollment.test_artifacts import DEPLOY, multipart
from tests.appliance.security.conftest import status_probe
from tests.conftest import start_appliance
from tests.polling import wait_for

BODY = b'{"value": "198.51.100.9"}'


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None, "application/jsonx"])
def test_json_routes_answer_415_to_other_media_types(appliance, content_type):
    headers = {"Content-Type": content_type} if content_type else {}
    if content_type is None:  # urllib adds a form type to a body without one; send the head by hand
        status = _raw_status(appliance, b"POST /api/v1/whitelist HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                             + appliance.app.admin_token.encode() + b"\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY)
        assert status == 415
    else:
        status, body = appliance.rest.call("POST", "/api/v1/whitelist", raw=BODY, headers=headers)
        assert status == 415 and body == {"error": "Send the body as application/json"}
    assert appliance.rest.get("/api/v1/whitelist")[1]["count"] == 0  # nothing stored
    assert appliance.rest.post("/api/v1/whitelist", {"value": "198.51.100.9"})[0] == 201  # JSON still works


def test_json_with_parameters_or_a_json_suffix_is_accepted(appliance):
    for content_type in ("application/json; charset=utf-8", "application/merge-patch+json"):
        status, _ = appliance.rest.call("POST", "/api/v1/signatures/validate", raw=b"{}",
                                        headers={"Content-Type": content_type})
        assert status == 422  # parsed, then judged: not refused for its media type


def _raw_status(appliance, request: bytes) -> int:
    context = ssl.create_default_context(cafile=str(appliance.app.ca.ca_cert_path))
    with socket.create_connection(("127.0.0.1", appliance.app.rest_port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            tls.sendall(request)
            return int(tls.recv(100).split(b" ")[1])


@pytest.fixture
def deployable(tmp_path, monkeypatch):
    monkeypatch.delenv("SENSOR_ADMIN_TOKEN", raising=False)
    monkeypatch.setenv("SENSOR_DEPLOY_TOKEN", DEPLOY)
    running = start_appliance(tmp_path)
    try:
        yield running
    finally:
        running.app.stop()


@pytest.mark.parametrize("name", ["agents/a\x00.exe", "\x00", "agents/linux-amd64/sensor-agent\x00../../x"])
def test_a_nul_in_an_uploaded_file_name_answers_400(deployable, name):
    body, ctype = multipart([(name, b"payload")])
    status, reply = deployable.rest.call("POST", "/api/v1/artifacts", raw=body, token=DEPLOY,
                                         headers={"Content-Type": ctype})
    assert status == 400 and "NUL" in reply["error"], reply
    assert not any(p.is_file() for p in (deployable.tmp / "static").rglob("*") if p.name != "ca.pem"
                   and p.name != "manifest.json")


def test_a_client_that_hangs_up_early_is_logged_in_one_line(appliance, caplog):
    caplog.set_level(logging.INFO, logger="appliance")
    context = ssl.create_default_context(cafile=str(appliance.app.ca.ca_cert_path))
    with status_probe(appliance):
        for _ in range(20):
            raw = socket.create_connection(("127.0.0.1", appliance.app.rest_port), timeout=10)
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset
            with context.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.sendall(b"POST /api/v1/whitelist HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                            b"Content-Length: 100000\r\n\r\n" + b" " * 1000)
            # closed mid-body
    # The server counts a disconnect, then logs it: wait for both (the last line may trail the counter).
    assert wait_for(lambda: appliance.app.rest_stats().get("client_disconnected", 0) == 20
                    and sum("disconnected early" in r.getMessage() for r in caplog.records) == 20, timeout=15), \
        appliance.app.rest_stats()
    server_records = [r for r in caplog.records if r.name.startswith("appliance")]
    assert all(r.exc_info is None and "Traceback" not in r.getMessage() for r in server_records)
    assert appliance.rest.get("/api/v1/metrics")[1]["rest_connections"]["client_disconnected"] == 20
    early = [r for r in server_records if "disconnected early" in r.getMessage()]
    assert len(early) == 20
