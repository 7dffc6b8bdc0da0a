"""Hostile or broken data on the cluster's streams: refused, counted, acknowledged (never stuck), and
the node keeps serving; a node whose partition count disagrees with the cluster's refuses to run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from appliance.cluster import bus
from appliance.flows import record_codec
from tests.appliance.cluster.conftest import ROOT, RedisServer, lone_analyzer, pending, redis_totals
from tests.appliance.cluster.test_checkpoint import flow
from tests.conftest import start_appliance
from tests.polling import wait_for

PARTITIONS = 2


def test_an_analyzer_refuses_entries_it_cannot_read_and_goes_on(tmp_path: Path, redis_server: RedisServer) -> None:
    analyzer, client = lone_analyzer(tmp_path, redis_server, PARTITIONS)
    good = [flow(i, 10.0 + i, 0x22000001, 443, 1000) for i in range(5)]
    stream = bus.flows_key(0)
    for fields in ({"k": "F", "d": b"\xff" * 64, "n": 3},  # not protobuf
                   {"k": "F", "d": b"\x08\x07", "n": 0},  # a batch of version 7
                   {"k": "Z", "d": b"", "n": 0},  # an unknown kind
                   {"x": "no fields we know"},
                   {"k": "D", "d": b"\x0a\x03\xff\xff\xff", "n": 0},  # a broken DNS batch
                   {"k": "F", "d": record_codec.encode(good), "n": 5}):
        client.xadd(stream, fields)
    analyzer.start()
    try:
        assert wait_for(lambda: analyzer.flows_analysed == 5, timeout=30)
        assert wait_for(lambda: pending(client, PARTITIONS) == 0, timeout=10)
    finally:
        analyzer.stop()
    assert analyzer.entries_refused == 5
    assert redis_totals(client, PARTITIONS)["analysed"] == 5


def test_the_manager_refuses_malformed_alert_events_and_keeps_upserting(tmp_path: Path, redis_server: RedisServer,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SENSOR_ADMIN_TOKEN", raising=False)
    (tmp_path / "signatures").mkdir()
    manager = start_appliance(tmp_path, cluster={"role": "manager", "redis_url": redis_server.url, "partitions": PARTITIONS})
    try:
        assert manager.app.grpc_port == 0  # the manager ingests nothing
        client = redis_server.client()
        detection = {"id": "d1", "detector": "behaviour.beaconing", "category": "Beaconing", "confidence": 0.8,
                     "severity": "Medium", "evidence": {"reason": "r"}, "flow_ids": ["f1"], "first_ns": 1, "last_ns": 2}
        alert = {"id": "alert-1", "agent_id": "agent", "indicator": "198.51.100.9", "category": "Beaconing",
                 "severity": 2, "confidence": 0.8, "summary": "s", "first_ns": 1, "last_ns": 2, "status": "New",
                 "detections": [detection], "detection_count": 1, "created_at": 1.0, "updated_at": 1.0}
        hostile = [b"not json", b"[]", json.dumps({"event": "deleted", "alert": alert}).encode(),
                   json.dumps({"event": "opened", "alert": {**alert, "severity": "high"}}).encode(),
                   json.dumps({"event": "opened", "alert": {**alert, "severity": True}}).encode(),
                   json.dumps({"event": "opened", "alert": {**alert, "id": "x" * 65}}).encode(),
                   json.dumps({"event": "opened", "alert": {**alert, "detections": "many"}}).encode(),
                   json.dumps({"event": "opened", "alert": {**alert, "detections": [{"detector": "x"}]}}).encode(),
                   json.dumps({"event": "opened", "alert": {**alert, "detections": [{**detection, "category": "Nope"}]}}).encode(),
                   json.dumps({"event": "opened", "alert": {**alert, "last_ns": 10**30}}).encode(),
                   json.dumps({"event": "opened", "alert": {**alert, "severity": 9}}).encode(),
                   json.dumps({"event": "opened", "alert": {**alert, "extra": 1}}).encode(),
                   b"{" * (2 << 20)]
        for raw in hostile:
            client.xadd(bus.alerts_key(1), {"a": raw})
        client.xadd(bus.alerts_key(1), {"a": json.dumps({"event": "opened", "alert": alert})})

        def alerts() -> list[dict[str, Any]]:
            return manager.rest.get("/api/v1/alerts?limit=10")[1]["alerts"]

        assert wait_for(lambda: len(alerts()) == 1, timeout=15)
        assert manager.rest.post("/api/v1/alerts/alert-1/status", {"status": "Investigating"})[0] == 200
        # The same event again (a replay) and an update: one alert, triage kept, the update applied.
        client.xadd(bus.alerts_key(1), {"a": json.dumps({"event": "opened", "alert": alert})})
        client.xadd(bus.alerts_key(0), {"a": json.dumps({"event": "updated", "alert": {**alert, "detection_count": 3}})})
        assert wait_for(lambda: (a := alerts()) and a[0]["detection_count"] == 3, timeout=15)
        (only,) = alerts()
        assert only["status"] == "Investigating"
        status = wait_for(lambda: (w := manager.rest.get("/api/v1/metrics")[1]["analysis_worker"])["cluster"]
                          ["alerts_consumed"] == 3 and w, timeout=10)
        assert status and status["mode"] == "manager" and status["cluster"]["alerts_refused"] == len(hostile)
    finally:
        manager.app.stop()


def test_an_analyzer_whose_partition_count_disagrees_exits_non_zero(tmp_path: Path, redis_server: RedisServer) -> None:
    bus.agree_on_layout(redis_server.client(), 16)
    (tmp_path / "sig").mkdir()
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps({"paths": {"state_dir": str(tmp_path / "state"), "signatures_dir": str(tmp_path / "sig"),
                                            "certs_dir": str(tmp_path / "certs"), "static_dir": str(tmp_path / "static")},
                                  "cluster": {"role": "analyzer", "redis_url": redis_server.url, "partitions": 8}}))
    proc = subprocess.run([sys.executable, "-m", "appliance", "--config", str(config)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={k: v for k, v in os.environ.items() if k != "SENSOR_ADMIN_TOKEN"})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "cluster.partitions is 8 here but 16 in Redis" in proc.stderr
