"""REST additions for the console: alert filters, cursor pages, groups, export, bulk triage, history,
MetricsSnapshot fields, console settings (detection mapping, retention)."""

from __future__ import annotations

import csv
import io
import json
import time

from appliance.detection.alerts import Alert
from appliance.model import Detection, Category, Severity


def _add(app, *, agent="agent-1", indicator="evil.example", category="DnsTunneling", severity=Severity.HIGH,
         status="New", age_s=0.0, summary="tunnel") -> Alert:
    now = time.time_ns() - int(age_s * 1e9)
    alert = Alert(id=Alert.new_id(), agent_id=agent, indicator=indicator, category=category, severity=int(severity),
                  confidence=0.9, summary=summary, first_ns=now - 1_000_000, last_ns=now, status=status)
    app.detection.alerts.save("opened", alert)
    return alert


def test_filters_include_exclude_several_values_and_relative_time(appliance):
    app, rest = appliance.app, appliance.rest
    a = _add(app, agent="a1", severity=Severity.HIGH)
    b = _add(app, agent="a2", category="Beaconing", severity=Severity.LOW)
    old = _add(app, agent="a3", severity=Severity.CRITICAL, age_s=3 * 86400)

    def ids(query: str) -> set[str]:
        status, body = rest.get("/api/v1/alerts?" + query)
        assert status == 200, body
        return {x["id"] for x in body["alerts"]}

    assert ids("") == {a.id, b.id, old.id}
    assert ids("agent_id=a1,a2") == {a.id, b.id}
    assert ids("not_agent_id=a1") == {b.id, old.id}
    assert ids("severity=High,Critical&not_category=Beaconing") == {a.id, old.id}
    assert ids("since=-24h") == {a.id, b.id}
    assert ids("until=-2d") == {old.id}
    assert ids("since=2000-01-01T00:00:00Z&category=Beaconing") == {b.id}
    for bad in ("since=yesterday", "sort=id", "status=Closed", "not_severity=Huge", "cursor=garbage",
                "since=-1h&until=-2h"):
        status, body = rest.get("/api/v1/alerts?" + bad)
        assert status == 422 and body["field"] == bad.split("=")[0], bad


def test_cursor_pages_cover_every_match_once_in_each_sort(appliance):
    app, rest = appliance.app, appliance.rest
    made = {_add(app, indicator=f"host{i}.example", severity=Severity(1 + i % 4), age_s=i).id for i in range(23)}
    for sort in ("-last_seen", "last_seen", "-severity", "severity", "first_seen"):
        seen: list[str] = []
        cursor = ""
        while True:
            status, body = rest.get(f"/api/v1/alerts?limit=5&sort={sort}" + (f"&cursor={cursor}" if cursor else ""))
            assert status == 200 and body["total"] == 23
            seen += [x["id"] for x in body["alerts"]]
            cursor = body["next_cursor"]
            if not cursor:
                break
        assert len(seen) == 23 and set(seen) == made, sort
    first = rest.get("/api/v1/alerts?limit=5&sort=-severity")[1]
    assert rest.get(f"/api/v1/alerts?limit=5&sort=last_seen&cursor={first['next_cursor']}")[1]["field"] == "cursor"


def test_groups_count_by_category_agent_indicator(appliance):
    app, rest = appliance.app, appliance.rest
    ids = [_add(app, indicator="c2.example", severity=s).id for s in (Severity.LOW, Severity.CRITICAL, Severity.MEDIUM)]
    _add(app, indicator="c2.example", status="Resolved")
    other = _add(app, indicator="other.example")
    status, body = rest.get("/api/v1/alerts/groups?not_status=Resolved")
    assert status == 200 and body["count"] == 2
    group = next(g for g in body["groups"] if g["indicator"] == "c2.example")
    assert group["count"] == 3 and group["severity"] == "Critical" and group["statuses"] == {"New": 3}
    assert set(group["alert_ids"]) == set(ids) and group["first_seen"] <= group["last_seen"]
    assert next(g for g in body["groups"] if g["indicator"] == "other.example")["alert_ids"] == [other.id]


def test_bulk_triage_applies_to_every_match_not_only_a_page_and_records_history(appliance):
    app, rest = appliance.app, appliance.rest
    targets = [_add(app, indicator="bulk.example") for _ in range(150)]
    closed = _add(app, indicator="bulk.example", status="Resolved")
    untouched = _add(app, indicator="keep.example")
    status, body = rest.post("/api/v1/alerts/bulk", {"filter": {"indicator": "bulk.example"}, "status": "Acknowledged",
                                                     "note": "seen"}, headers={"X-Console-User": "ana"})
    assert status == 200 and body == {"matched": 151, "changed": 150, "skipped": 1}
    assert all(app.detection.alerts.get(a.id).status == "Acknowledged" for a in targets)
    assert app.detection.alerts.get(closed.id).status == "Resolved"
    assert app.detection.alerts.get(untouched.id).status == "New"
    detail = rest.get(f"/api/v1/alerts/{targets[0].id}")[1]
    assert [(h["actor"], h["from"], h["to"], h["note"]) for h in detail["history"]] == [("ana", "New", "Acknowledged", "seen")]
    # an empty filter would change everything: it needs "all": true
    assert rest.post("/api/v1/alerts/bulk", {"filter": {}, "status": "Resolved"})[0] == 422
    assert rest.post("/api/v1/alerts/bulk", {"filter": {"nope": "x"}, "status": "Resolved"})[0] == 422
    assert rest.post("/api/v1/alerts/bulk", {"filter": {"status": "Bogus"}, "status": "Resolved"})[1]["field"] == "status"
    assert rest.post("/api/v1/alerts/bulk", {"filter": {}, "status": "Resolved", "all": True})[1] == {
        "matched": 152, "changed": 151, "skipped": 1}


def test_status_note_history_and_bad_console_user(appliance):
    app, rest = appliance.app, appliance.rest
    alert = _add(app)
    assert rest.post(f"/api/v1/alerts/{alert.id}/status", {"status": "Investigating", "note": "why"})[0] == 200
    status, body = rest.post(f"/api/v1/alerts/{alert.id}/status", {"status": "Acknowledged"},
                             headers={"X-Console-User": "bad user\u00e9"})
    assert status == 422 and body["field"] == "X-Console-User"
    assert rest.post(f"/api/v1/alerts/{alert.id}/status", {"status": "Acknowledged", "note": "x" * 1001})[0] == 422
    detail = rest.get(f"/api/v1/alerts/{alert.id}")[1]
    assert detail["status"] == "Investigating"
    assert [(h["actor"], h["to"], h["note"]) for h in detail["history"]] == [("admin-token", "Investigating", "why")]


def test_export_csv_and_json_of_every_match_with_formula_cells_neutralised(appliance):
    app, rest = appliance.app, appliance.rest
    hostile = _add(app, indicator="=HYPERLINK(\"http://x\")", summary="+cmd|' /C calc'!A0")
    _add(app, indicator="fine.example")
    _add(app, indicator="other.example", category="Beaconing")
    status, raw = rest.get("/api/v1/alerts/export?format=csv&category=DnsTunneling")
    assert status == 200
    rows = list(csv.DictReader(io.StringIO(raw.decode())))
    assert len(rows) == 2
    row = next(r for r in rows if r["id"] == hostile.id)
    assert row["indicator"].startswith("'=") and row["summary"].startswith("'+")
    status, body = rest.get("/api/v1/alerts/export?format=json")
    assert status == 200 and body["count"] == 3
    assert rest.get("/api/v1/alerts/export?format=xml")[0] == 422


def test_metrics_carry_the_metrics_snapshot_fields(appliance):
    status, body = appliance.rest.get("/api/v1/metrics")
    assert status == 200
    for key in ("timestamp", "totalPackets", "totalBytes", "packetsPerSecond", "bytesPerSecond", "activeThreats",
                "captureUptime"):
        assert isinstance(body[key], (int, float)), key
    assert body["activeThreats"] == body["active_alerts"] and body["totalPackets"] == body["packets_received"]


def test_settings_partial_update_validation_and_detection_mapping(appliance):
    rest = appliance.rest
    status, body = rest.get("/api/v1/settings")
    assert status == 200 and body["detection"]["sensitivityLevel"] == "medium"
    assert body["layerOfCategory"]["DnsTunneling"] == "dns" and set(body["layerOfCategory"]) == {c.value for c in Category}
    status, body = rest.call("PUT", "/api/v1/settings", {"detection": {"sensitivityLevel": "high"},
                                                         "storage": {"retentionDays": 7}})
    assert status == 200 and body["storage"] == {"retentionDays": 7, "maxStorageGb": 10.0, "exportFormat": "csv"}
    assert rest.get("/api/v1/config")[1]["correlation"]["min_confidence"] == 0.4
    status, body = rest.call("PUT", "/api/v1/settings", {"storage": {"retentionDays": 0, "exportFormat": "xml"},
                                                         "detection": {"autoBlock": True}})
    assert status == 422 and set(body["fields"]) == {"storage.retentionDays", "storage.exportFormat", "detection.autoBlock"}
    assert rest.call("PUT", "/api/v1/settings", {"bogus": {}})[1]["field"] == "bogus"
    assert rest.call("PUT", "/api/v1/settings", raw=b"[]")[0] == 422
    assert rest.get("/api/v1/settings")[1]["storage"]["retentionDays"] == 7  # nothing half-applied


def test_disabled_layers_drop_their_detections(appliance):
    store = appliance.app.extras["console_settings"]
    detection = Detection(detector="dpi.dns_tunneling", category=Category.DNS_TUNNELING, confidence=0.9,
                          severity=Severity.HIGH, agent_id="a", indicator="x.example")
    assert store.allows(detection)
    assert appliance.rest.call("PUT", "/api/v1/settings", {"detection": {"enabledLayers": ["network", "tls"]}})[0] == 200
    assert not store.allows(detection)


def test_a_shorter_retention_deletes_old_alerts_at_once(appliance):
    app, rest = appliance.app, appliance.rest
    fresh = _add(app)
    stale = _add(app, indicator="stale.example")
    with app.detection.db.lock, app.detection.db.conn:
        app.detection.db.conn.execute("UPDATE alerts SET updated_at = ? WHERE id = ?", (time.time() - 40 * 86400, stale.id))
    assert rest.call("PUT", "/api/v1/settings", {"storage": {"retentionDays": 30}})[0] == 200
    assert rest.get(f"/api/v1/alerts/{stale.id}")[0] == 404 and rest.get(f"/api/v1/alerts/{fresh.id}")[0] == 200
    assert rest.get("/api/v1/metrics")[1]["retention_alerts_deleted"] == 1
    assert app.extras["retention"].enforce() == {"alerts": 0, "flows": 0}


def test_retention_drops_finished_flows_older_than_the_cutoff():
    from types import SimpleNamespace

    from appliance.flows.finished import FinishedFlows

    ring = FinishedFlows(10)
    ring.extend([SimpleNamespace(last_ns=n, agent_id="a", flow_id=str(n)) for n in (5, 50, 500)])  # type: ignore[list-item]
    assert ring.drop_older_than(100) == 2
    assert [f.flow_id for f in ring.newest(None, 10)] == ["500"]


def test_storage_cap_deletes_oldest_closed_alerts_first(appliance):
    app = appliance.app
    closed = [_add(app, indicator=f"c{i}.example", status="Resolved", summary="x" * 2000) for i in range(300)]
    open_alert = _add(app, indicator="open.example")
    retention = app.extras["retention"]
    settings = app.extras["console_settings"]
    used = retention.used_bytes()

    def cap(gb: float) -> None:  # model_copy skips validation: a cap below the API's 0.1 GB floor, for the test
        settings.replace(settings.current.model_copy(
            update={"storage": settings.current.storage.model_copy(update={"maxStorageGb": gb})}))

    cap(0.1)  # far above this test's data: nothing goes
    assert retention.alerts_deleted == 0
    cap((used / 2) / 1024 ** 3)  # a new cap applies at once
    assert retention.alerts_deleted > 0 and retention.used_bytes() <= used / 2
    assert app.detection.alerts.get(open_alert.id) is not None
    assert app.detection.alerts.get(closed[0].id) is None


def test_metrics_rates_follow_real_grpc_traffic(appliance):
    from tests.appliance.detection import scenarios as sc

    before = appliance.rest.get("/api/v1/metrics")[1]
    sc.stream(appliance.stub(), sc.raw_ip_tls())
    after = appliance.rest.get("/api/v1/metrics")[1]
    assert after["totalPackets"] > before["totalPackets"] and after["totalBytes"] > before["totalBytes"]
    assert after["packetsPerSecond"] > 0 and after["bytesPerSecond"] > 0


def test_hostile_alert_queries_are_422_naming_the_parameter_and_the_store_is_intact(appliance):
    import base64

    app, rest = appliance.app, appliance.rest
    alert = _add(app)

    def forged(value: object) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    cursors = [forged(["last_ns", True, "1 OR 1=1", "x"]), forged(["id; DROP TABLE alerts", True, 1, "x"]),
               forged(["last_ns", True, 1, "x" * 100]), forged({"a": 1}), forged([[[[[]]]]]), "%%%", "A" * 2000]
    for cursor in cursors:
        status, body = rest.get(f"/api/v1/alerts?cursor={cursor}")
        assert status == 422 and body["field"] == "cursor", cursor[:40]
    many = ",".join(f"agent{i}" for i in range(51))
    assert rest.get(f"/api/v1/alerts/groups?agent_id={many}")[1]["field"] == "agent_id"
    assert rest.get("/api/v1/alerts/export?indicator=" + "x" * 5000)[0] == 422
    assert rest.get("/api/v1/alerts?since=-9999999d")[0] == 422
    assert rest.get("/api/v1/alerts?indicator=%27%20OR%20%271%27=%271")[1]["total"] == 0
    status, body = rest.post("/api/v1/alerts/bulk", raw=b'{"filter": {"status": "New"}, "status": "Resolved", "note": "'
                             + b"x" * 2000 + b'"}')
    assert status == 422 and "note" in body["fields"]
    assert rest.post("/api/v1/alerts/bulk", raw=b'{"filter": "New", "status": "Resolved"}')[0] == 422
    assert app.detection.alerts.get(alert.id).status == "New"
    assert rest.get("/api/v1/alerts")[1]["total"] == 1
