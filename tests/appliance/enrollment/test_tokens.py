"""Enrollment tokens through the REST API: creation, single use (also under concurrency), expiry, persistence."""

from __future__ import annotations

import calendar
import logging
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from appliance.enrollment.service import RUN_AS_ROOT

from tests.appliance.enrollment.conftest import fetch_script, new_token, put_payload
from tests.conftest import start_appliance


def test_token_reply_has_uuid4_token_commands_and_expiry(enrolling):
    reply = new_token(enrolling)
    token = uuid.UUID(reply["token"])
    assert token.version == 4 and str(token) == reply["token"]
    base = f"https://localhost:{enrolling.app.rest_port}"
    assert f"{base}/api/v1/enroll/windows?token={reply['token']}" in reply["command"]
    assert "\n" not in reply["command"] and "\n" not in reply["command_unix"]
    assert f"{base}/api/v1/enroll/$(uname -s" in reply["command_unix"]
    assert reply["command_unix"].endswith("| " + RUN_AS_ROOT)
    expires = calendar.timegm(time.strptime(reply["expires_at"], "%Y-%m-%dT%H:%M:%SZ"))
    assert abs(expires - (time.time() + 24 * 3600)) < 120


def test_token_creation_needs_the_admin_token(enrolling):
    status, body = enrolling.rest.post("/api/v1/agent/tokens", token=None)
    assert status == 401 and "error" in body
    status, _ = enrolling.rest.post("/api/v1/agent/tokens", token="wrong")
    assert status == 401


def test_token_is_single_use(enrolling):
    token = new_token(enrolling)["token"]
    status, script = fetch_script(enrolling, "windows", token)
    assert status == 200 and b"sensor-agent" in script
    status, body = fetch_script(enrolling, "windows", token)
    assert status == 403 and body == {"error": "Invalid, expired or already used enrollment token", "code": "token_refused"}
    status, _ = fetch_script(enrolling, "linux", token)
    assert status == 403


def test_token_is_single_use_under_50_concurrent_requests(enrolling):
    token = new_token(enrolling)["token"]
    kinds = ["windows", "linux", "macos"]
    with ThreadPoolExecutor(max_workers=50) as pool:
        results = list(pool.map(lambda i: fetch_script(enrolling, kinds[i % 3], token), range(50)))
    statuses = sorted(status for status, _ in results)
    assert statuses == [200] + [403] * 49
    winners = [body for status, body in results if status == 200]
    assert isinstance(winners[0], bytes) and winners[0]
    status, body = enrolling.rest.get("/api/v1/agent/certificates")
    assert body["count"] == 1  # one certificate issued, not fifty


def test_unknown_malformed_and_expired_tokens_are_refused_and_logged(enrolling, caplog):
    caplog.set_level(logging.INFO)
    short = new_token(enrolling, ttl_hours=0.0002)["token"]  # expires in under a second
    time.sleep(1.0)
    for token in (str(uuid.uuid4()), "not-a-token", "", short, "../../etc/passwd", str(uuid.uuid1())):
        status, body = fetch_script(enrolling, "linux", token)
        assert status == 403, token
        assert set(body) == {"error", "code"}
    refusals = [r.getMessage() for r in caplog.records if "enrollment refused" in r.getMessage()]
    assert len(refusals) == 6
    assert all("source=127.0.0.1" in line for line in refusals)
    assert any("reason=expired" in line for line in refusals)
    assert any("reason=unknown" in line for line in refusals)
    # Tokens never appear whole in the log, only their first 6 characters.
    assert not any(short in r.getMessage() for r in caplog.records)
    status, _ = enrolling.rest.get("/api/v1/enroll/linux", token=None)
    assert status == 403


def test_whole_tokens_never_reach_the_log(enrolling, caplog):
    caplog.set_level(logging.DEBUG)
    token = new_token(enrolling)["token"]
    assert fetch_script(enrolling, "linux", token)[0] == 200
    assert not any(token in r.getMessage() for r in caplog.records)
    assert any(f"token={token[:6]}" in r.getMessage() for r in caplog.records)


def test_missing_payload_refuses_without_using_the_token(appliance):
    token = new_token(appliance)["token"]
    status, body = fetch_script(appliance, "linux", token)
    assert status == 409 and body["code"] == "payload_missing"
    put_payload(appliance)
    status, script = fetch_script(appliance, "linux", token)
    assert status == 200 and script.startswith(b"#!/bin/sh")


def test_a_restart_neither_revives_a_used_token_nor_loses_an_unused_one(tmp_path, monkeypatch):
    monkeypatch.delenv("SENSOR_ADMIN_TOKEN", raising=False)
    first = start_appliance(tmp_path)
    try:
        put_payload(first)
        used, unused = new_token(first)["token"], new_token(first)["token"]
        assert fetch_script(first, "linux", used)[0] == 200
    finally:
        first.app.stop()
    second = start_appliance(tmp_path)
    try:
        assert fetch_script(second, "linux", used)[0] == 403
        assert fetch_script(second, "linux", unused)[0] == 200
    finally:
        second.app.stop()
    db = tmp_path / "state" / "enrollment.sqlite3"
    files = list(db.parent.glob("enrollment.sqlite3*"))
    assert db in files and all(f.stat().st_mode & 0o777 == 0o600 for f in files), files
    assert used.encode() not in db.read_bytes()  # only the hash is stored


def test_scripts_are_not_sent_over_plain_http(tmp_path, monkeypatch):
    monkeypatch.delenv("SENSOR_ADMIN_TOKEN", raising=False)
    running = start_appliance(tmp_path, rest={"tls": False})
    try:
        put_payload(running)
        token = new_token(running)["token"]
        status, body = fetch_script(running, "linux", token)
        assert status == 503 and "HTTPS" in body["error"]
    finally:
        running.app.stop()


def test_configured_base_url_is_used_and_validated(tmp_path, monkeypatch):
    monkeypatch.delenv("SENSOR_ADMIN_TOKEN", raising=False)
    from appliance.errors import ConfigError
    from tests.conftest import appliance_settings

    with pytest.raises(ConfigError, match="enrollment.base_url"):
        appliance_settings(tmp_path, enrollment={"base_url": "https://x'; rm -rf /;'"})
    running = start_appliance(tmp_path, enrollment={"base_url": "https://appliance.corp.example:8443/",
                                                    "grpc_url": "https://ingest.corp.example:443"})
    try:
        put_payload(running)
        reply = new_token(running)
        assert "'https://appliance.corp.example:8443/api/v1/enroll/windows?token=" in reply["command"]
        assert '"https://appliance.corp.example:8443/api/v1/enroll/$(uname' in reply["command_unix"]
        script = fetch_script(running, "linux", reply["token"])[1].decode()
        assert "TARGET_URL='https://ingest.corp.example:443'" in script
        assert "BASE_URL='https://appliance.corp.example:8443'" in script
    finally:
        running.app.stop()
