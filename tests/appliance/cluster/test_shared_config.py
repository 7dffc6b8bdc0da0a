"""The manager's REST changes of what steers analysis (exclusions, console settings, the analysis config) and its
triage reach every analyzer through Redis; documents and entries an analyzer cannot use are refused and counted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from appliance.app import open_stores
from appliance.cluster import bus, shared_config
from appliance.cluster.analyzer import Analyzer
from appliance.detection.alert import Alert
from appliance.model import Category, Detection, Severity
from tests.appliance.cluster.conftest import RedisServer
from tests.conftest import appliance_settings, start_appliance
from tests.polling import wait_for

PARTITIONS = 2


def detection_toward(remote: str) -> Detection:
    return Detection(detector="behaviour.beaconing", category=Category.BEACONING, confidence=0.9, severity=Severity.HIGH,
                     agent_id="agent-1", indicator=remote, evidence={"dst": remote, "protocol": "tcp"},
                     flow_ids=["f1"], first_ns=1, last_ns=2)


def holds_what_was_published(stores: Any, client: Any) -> bool:
    published = {k.decode(): json.loads(v) for k, v in client.hgetall(shared_config.CONFIG).items()}
    return {k: json.loads(v) for k, v in shared_config.documents(stores).items()} == published


def manager_and_analyzer(tmp_path: Path, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Analyzer, Any]:
    """A manager (in this process, its REST on a free port) and an analyzer (not started) on one Redis."""
    monkeypatch.delenv("SENSOR_ADMIN_TOKEN", raising=False)
    (tmp_path / "manager" / "signatures").mkdir(parents=True)
    (tmp_path / "analyzer" / "signatures").mkdir(parents=True)
    cluster = {"redis_url": redis_server.url, "partitions": PARTITIONS}
    manager = start_appliance(tmp_path / "manager", cluster={"role": "manager", **cluster})
    analyzer = Analyzer(appliance_settings(tmp_path / "analyzer", cluster={"role": "analyzer", "node_id": "a1", **cluster}))
    client = redis_server.client()
    bus.agree_on_layout(client, PARTITIONS)
    return manager, analyzer, client


def test_the_managers_rest_changes_reach_a_running_analyzer(tmp_path: Path, redis_server: RedisServer,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    manager, analyzer, client = manager_and_analyzer(tmp_path, redis_server, monkeypatch)
    analyzer.start()
    try:
        rest = manager.rest
        assert wait_for(lambda: analyzer.config_version >= 1, timeout=15)  # what the manager had at start
        beacon = detection_toward("203.0.113.50")
        assert analyzer.stores.exclusions.allows(beacon)
        status, entry = rest.post("/api/v1/whitelist", {"value": "203.0.113.0/24", "protocol": "any", "comment": "lab"})
        assert status == 201, entry
        assert rest.call("PUT", "/api/v1/settings", {"detection": {"sensitivityLevel": "high"}})[0] == 200
        config = rest.get("/api/v1/config")[1]
        config["beaconing"]["min_connections"] = 11
        assert rest.post("/api/v1/config", config)[0] == 200
        # The analyzer takes a version's documents one store after another (settings, config, exclusions) and
        # the manager may publish the three changes as one version or several: wait for all of them in use.
        assert wait_for(lambda: analyzer.stores.config.current.beaconing.min_connections == 11
                        and [e.value for e in analyzer.stores.exclusions.all()] == ["203.0.113.0/24"]
                        and analyzer.stores.console_settings.current.detection.sensitivityLevel == "high"
                        and holds_what_was_published(analyzer.stores, client), timeout=15)
        assert holds_what_was_published(analyzer.stores, client)
        assert [e.value for e in analyzer.stores.exclusions.all()] == ["203.0.113.0/24"]
        assert not analyzer.stores.exclusions.allows(beacon)  # the analyzer now drops what the manager excludes
        assert analyzer.stores.config.current.beaconing.min_connections == 11
        assert analyzer.stores.console_settings.current.detection.sensitivityLevel == "high"
        assert rest.call("DELETE", f"/api/v1/whitelist/{entry['id']}")[0] == 200
        assert wait_for(lambda: analyzer.stores.exclusions.allows(beacon), timeout=15)
        # changes in quick succession go out together: at least the start and one more. The manager counts a
        # version once Redis has answered its publish, which the analyzer may have read already: wait for both.
        def same_version() -> int:
            version = int(manager.rest.get("/api/v1/metrics")[1]["analysis_worker"]["cluster"]["config_version"])
            return version if version >= 2 and analyzer.config_version == version else 0

        assert wait_for(same_version, timeout=15), (analyzer.config_version, manager.rest.get("/api/v1/metrics")[1])
    finally:
        analyzer.stop()
        manager.app.stop()
    # The analyzer wrote what it took into its own database: a restart starts from it.
    reopened = open_stores(appliance_settings(tmp_path / "analyzer"))
    try:
        assert reopened.config.current.beaconing.min_connections == 11 and reopened.exclusions.all() == []
    finally:
        reopened.db.close()


def _documents(tmp_path: Path) -> dict[str, Any]:
    stores = open_stores(appliance_settings(tmp_path / "source"))
    try:
        stores.exclusions.add("198.51.100.7", "any", None, "a host")
        return {k: json.loads(v) for k, v in shared_config.documents(stores).items()}
    finally:
        stores.db.close()


HOSTILE: list[tuple[str, Any]] = [
    ("exclusions", "not a list"),
    ("exclusions", [["1", "198.51.100.7", "ip", "any", None, "", 1.0]]),  # a row, not an object
    ("exclusions", [{"id": "1", "value": "198.51.100.7", "kind": "ip", "protocol": "smtp", "agent_id": None,
                     "comment": "", "created_at": 1.0}]),  # a scope that does not exist
    ("exclusions", [{"id": "1", "value": "198.051.100.7", "kind": "ip", "protocol": "any", "agent_id": None,
                     "comment": "", "created_at": 1.0}]),  # not the normal form
    ("exclusions", [{"id": "1", "value": "example.com", "kind": "ip", "protocol": "any", "agent_id": None,
                     "comment": "", "created_at": 1.0}]),  # the wrong kind
    ("exclusions", [{"id": 1, "value": "198.51.100.7", "kind": "ip", "protocol": "any", "agent_id": None,
                     "comment": "", "created_at": True}]),
    ("exclusions", [{"id": "1", "value": "198.51.100.7", "kind": "ip", "protocol": "any", "agent_id": None,
                     "comment": "", "created_at": 1.0, "extra": 1}]),
    ("analysis_config", {"beaconing": {"min_connections": -5}}),
    ("analysis_config", {"no_such_section": {}}),
    ("console_settings", {"detection": {"sensitivityLevel": "extreme"}}),
    ("console_settings", None),
]


def test_an_analyzer_refuses_documents_it_cannot_use_and_keeps_what_it_had(tmp_path: Path,
                                                                           redis_server: RedisServer) -> None:
    good = _documents(tmp_path)
    settings = appliance_settings(tmp_path / "analyzer", cluster={"role": "analyzer", "redis_url": redis_server.url,
                                                                   "partitions": PARTITIONS, "node_id": "a1"})
    (tmp_path / "analyzer" / "signatures").mkdir(parents=True)
    client = redis_server.client()
    bus.agree_on_layout(client, PARTITIONS)

    def publish(docs: dict[str, Any], raw: dict[str, bytes] | None = None) -> int:
        pipe = client.pipeline(transaction=True)  # the whole hash replaced, then the version moved, at once
        pipe.delete(shared_config.CONFIG)
        pipe.hset(shared_config.CONFIG, mapping=raw or {k: json.dumps(v) for k, v in docs.items()})
        pipe.incr(shared_config.VERSION)
        return int(pipe.execute()[-1])

    analyzer = Analyzer(settings)
    analyzer.start()
    try:
        version = publish(good)
        assert wait_for(lambda: analyzer.config_version == version, timeout=15)
        kept = analyzer.stores.exclusions.all()
        assert [e.value for e in kept] == ["198.51.100.7"]
        cases = [{**good, name: value} for name, value in HOSTILE]
        raw_cases = [{"analysis_config": b"{" * 100, "console_settings": b"{}", "exclusions": b"[]"},
                     {"analysis_config": b"{}", "console_settings": b"{}", "exclusions": b" " * (shared_config.MAX_DOCUMENT_BYTES + 1)},
                     {"analysis_config": b"{}", "console_settings": b"{}"}]  # one document missing
        for n, docs in enumerate(cases + raw_cases, start=1):
            version = publish({}, docs) if n > len(cases) else publish(docs)
            assert wait_for(lambda: analyzer.config_version == version, timeout=15), docs
            assert analyzer.config_refused == n, docs
            assert analyzer.stores.exclusions.all() == kept
        version = publish({**good, "exclusions": []})  # a good document after the bad ones is taken
        assert wait_for(lambda: analyzer.config_version == version and not analyzer.stores.exclusions.all(), timeout=15)
        assert analyzer.stats()["config_refused"] == len(cases) + len(raw_cases)
    finally:
        analyzer.stop()


def test_triage_on_the_manager_reaches_the_analyzers_copy_of_the_alert(tmp_path: Path, redis_server: RedisServer,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    manager, analyzer, client = manager_and_analyzer(tmp_path, redis_server, monkeypatch)
    fields = {"id": "alert-1", "agent_id": "agent-1", "indicator": "203.0.113.9", "category": "Beaconing", "severity": 2,
              "confidence": 0.8, "summary": "s", "first_ns": 1, "last_ns": 2, "status": "New", "detections": [],
              "detection_count": 1, "created_at": 1.0, "updated_at": 1.0}
    # The same alert on both sides, as when an analyzer opened it and the manager took its event.
    analyzer.stores.alerts.save("opened", Alert(**fields))
    analyzer.stores.alerts.commit()
    assert analyzer.stores.alerts.find_open("agent-1", "203.0.113.9") is not None
    client.xadd(bus.alerts_key(0), {"a": json.dumps({"event": "opened", "alert": fields})})
    for hostile in ({"i": "x" * 65, "s": "Resolved"}, {"i": "alert-1", "s": "Gone"}, {"x": "y"},
                    {"i": b"\xff\xfe", "s": "New"}):
        client.xadd(shared_config.TRIAGE, hostile)
    analyzer.start()
    try:
        rest = manager.rest
        assert wait_for(lambda: rest.get("/api/v1/alerts/alert-1")[0] == 200, timeout=15)
        assert wait_for(lambda: analyzer.triage_refused == 4, timeout=15)
        assert rest.post("/api/v1/alerts/alert-1/status", {"status": "Resolved", "note": "false lead"})[0] == 200
        assert wait_for(lambda: analyzer.stores.alerts.get("alert-1").status == "Resolved", timeout=15)
        # Closed on the analyzer too: the next detections toward it open a new alert instead of updating this one.
        assert analyzer.stores.alerts.find_open("agent-1", "203.0.113.9") is None
        # The analyzer counts a triage entry after it set the status, the manager after Redis answered its
        # publish: wait for each counter rather than read it right after the status moved.
        assert wait_for(lambda: analyzer.triage_taken == 1, timeout=15), analyzer.triage_taken
        assert analyzer.stats()["triage_refused"] == 4
        assert wait_for(lambda: rest.get("/api/v1/metrics")[1]["analysis_worker"]["cluster"]["triage_published"] == 1,
                        timeout=15), rest.get("/api/v1/metrics")[1]["analysis_worker"]["cluster"]
    finally:
        analyzer.stop()
        manager.app.stop()
