"""Alerts over REST: shape, filters, triage transitions, deletion, metrics, persistence across kill -9."""

from __future__ import annotations

import os
import re
import signal
import ssl
import subprocess
import sys
import time
import uuid
from pathlib import Path

import grpc
import pytest
import yaml

from appliance.generated import sensor_pb2_grpc
from appliance.pki import CertificateAuthority
from tests.appliance.detection import scenarios as sc
from tests.appliance.detection.conftest import RULES, SHIPPED_RULES, alerts_of
from tests.conftest import Rest

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def _two_alerts(running):
    stub = running.stub()
    sc.stream(stub, sc.iodine_tunnel())
    sc.stream(stub, sc.raw_ip_tls())
    return alerts_of(running)


def test_alert_has_the_documented_shape(detecting):
    alerts = _two_alerts(detecting)
    assert len(alerts) == 2
    for alert in alerts:
        assert UUID.match(alert["id"])
        assert alert["severity"] in ("Low", "Medium", "High", "Critical")
        assert 0.0 <= alert["confidence"] <= 1.0
        assert alert["status"] == "New"
        assert alert["first_seen"].endswith("Z") and alert["first_seen"] <= alert["last_seen"]
        for detection in alert["detections"]:
            assert set(detection) >= {"detector", "category", "confidence", "evidence"}
    assert alerts[0]["last_seen"] >= alerts[1]["last_seen"]  # newest first


def test_filters_and_limit(detecting):
    alerts = _two_alerts(detecting)
    tunnel = next(a for a in alerts if a["category"] == "DnsTunneling")
    assert [a["id"] for a in alerts_of(detecting, category="DnsTunneling")] == [tunnel["id"]]
    assert [a["id"] for a in alerts_of(detecting, agent_id=tunnel["agent_id"])] == [tunnel["id"]]
    assert len(alerts_of(detecting, status="New")) == 2 and alerts_of(detecting, status="Resolved") == []
    assert {a["id"] for a in alerts_of(detecting, severity=tunnel["severity"])} >= {tunnel["id"]}
    status, body = detecting.rest.get("/api/v1/alerts?limit=1")
    assert status == 200 and body["count"] == 1
    status, body = detecting.rest.get("/api/v1/alerts?category=Nope")
    assert status == 422 and body["field"] == "category"


def test_triage_transitions_and_invalid_transition(detecting):
    alert = _two_alerts(detecting)[0]
    path = f"/api/v1/alerts/{alert['id']}/status"
    for step in ("Acknowledged", "Investigating", "Resolved"):
        status, body = detecting.rest.post(path, {"status": step})
        assert status == 200 and body["status"] == step
    status, body = detecting.rest.post(path, {"status": "Investigating"})
    assert status == 400 and body["code"] == "INVALID_TRANSITION" and "error" in body
    status, body = detecting.rest.post(path, {"status": "New"})  # reopen
    assert status == 200 and body["status"] == "New"
    status, body = detecting.rest.post(path, {"status": "Bogus"})
    assert status == 422
    status, _ = detecting.rest.post(f"/api/v1/alerts/{uuid.uuid4()}/status", {"status": "Resolved"})
    assert status == 404


def test_active_alerts_metric_counts_open_alerts_and_delete_removes(detecting):
    alerts = _two_alerts(detecting)
    assert detecting.rest.get("/api/v1/metrics")[1]["active_alerts"] == 2
    detecting.rest.post(f"/api/v1/alerts/{alerts[0]['id']}/status", {"status": "FalsePositive"})
    metrics = detecting.rest.get("/api/v1/metrics")[1]
    assert metrics["active_alerts"] == 1 and metrics["alerts_generated"] == 2 and metrics["signature_rules"] == SHIPPED_RULES
    assert metrics["analysis_worker"]["signature_rules"] == SHIPPED_RULES  # the rule set analysis runs (here: a thread)
    status, _ = detecting.rest.call("DELETE", f"/api/v1/alerts/{alerts[1]['id']}")
    assert status == 200
    assert detecting.rest.get(f"/api/v1/alerts/{alerts[1]['id']}")[0] == 404
    assert detecting.rest.get("/api/v1/metrics")[1]["active_alerts"] == 0


def test_a_group_with_an_open_alert_updates_it_instead_of_opening_another(detecting):
    stub = detecting.stub()
    sc.stream(stub, sc.iodine_tunnel(sc.T0_MS, seconds=60))
    (first,) = alerts_of(detecting)
    sc.stream(stub, sc.iodine_tunnel(sc.T0_MS + 400_000, seconds=60))
    (again,) = alerts_of(detecting)
    assert again["id"] == first["id"]
    assert again["last_seen"] > first["last_seen"] and again["detection_count"] > first["detection_count"]


def test_alerts_require_authentication(detecting):
    assert detecting.rest.get("/api/v1/alerts", token=None)[0] == 401


@pytest.mark.slow
def test_alerts_and_triage_survive_kill_9_and_restart(tmp_path):
    state, certs, signatures = tmp_path / "state", tmp_path / "certs", tmp_path / "signatures"
    signatures.mkdir()
    for rule in RULES.glob("*.yaml"):
        (signatures / rule.name).write_bytes(rule.read_bytes())
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "grpc": {"listen": "127.0.0.1:0"}, "rest": {"listen": "127.0.0.1:0", "check_replies": True},
        "paths": {"state_dir": str(state), "certs_dir": str(certs), "signatures_dir": str(signatures),
                  "static_dir": str(tmp_path / "static")},
        "tls": {"server_names": ["localhost", "127.0.0.1"]},
    }))
    env = {**os.environ, "SENSOR_ADMIN_TOKEN": "t0ken-for-test", "PYTHONUNBUFFERED": "1"}
    root = Path(__file__).resolve().parents[3]

    def launch() -> tuple[subprocess.Popen[str], int, int]:
        proc = subprocess.Popen([sys.executable, "-m", "appliance", "--config", str(config)], cwd=root, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        grpc_port = rest_port = 0
        deadline = time.time() + 30
        while time.time() < deadline and not (grpc_port and rest_port):
            line = proc.stdout.readline()  # type: ignore[union-attr]
            if m := re.search(r"gRPC ingestion : port (\d+)", line):
                grpc_port = int(m.group(1))
            if m := re.search(r"REST API\s+: https://localhost:(\d+)", line):
                rest_port = int(m.group(1))
        assert grpc_port and rest_port, "appliance did not start"
        return proc, grpc_port, rest_port

    proc, grpc_port, rest_port = launch()
    try:
        ca = CertificateAuthority.ensure(certs, ["localhost", "127.0.0.1"])
        issued = ca.issue_agent("sensor-agent-kill9")
        creds = grpc.ssl_channel_credentials(ca.ca_pem, issued.key_pem, issued.cert_pem)
        channel = grpc.secure_channel(f"127.0.0.1:{grpc_port}", creds, options=[("grpc.ssl_target_name_override", "localhost")])
        sc.stream(sensor_pb2_grpc.SensorServiceStub(channel), sc.iodine_tunnel())
        channel.close()
        rest = Rest(f"https://localhost:{rest_port}", "t0ken-for-test", ssl.create_default_context(cafile=str(ca.ca_cert_path)))
        deadline = time.time() + 20
        alerts: list = []
        while time.time() < deadline and not alerts:
            alerts = rest.get("/api/v1/alerts")[1]["alerts"]
            time.sleep(0.1)
        assert len(alerts) == 1
        assert rest.post(f"/api/v1/alerts/{alerts[0]['id']}/status", {"status": "Investigating"})[0] == 200
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    proc, grpc_port, rest_port = launch()
    try:
        rest = Rest(f"https://localhost:{rest_port}", "t0ken-for-test", ssl.create_default_context(cafile=str(ca.ca_cert_path)))
        status, body = rest.get(f"/api/v1/alerts/{alerts[0]['id']}")
        assert status == 200 and body["status"] == "Investigating" and body["category"] == "DnsTunneling"
        assert rest.get("/api/v1/metrics")[1]["active_alerts"] == 1
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
