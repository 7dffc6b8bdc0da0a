"""AlertStore's active count: kept by each save (never a scan of the table per alert) and always equal to
what the table says."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from appliance.detection.alert import Alert
from appliance.detection.alert_store import AlertStore
from appliance.detection.database import DetectionDatabase


def alert(n: int, status: str = "New") -> Alert:
    return Alert(id=f"alert-{n}", agent_id="agent-1", indicator=f"203.0.113.{n}", category="RawIpTls", severity=2,
                 confidence=0.7, summary="", first_ns=n, last_ns=n, status=status)


def counted(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT COUNT(*) FROM alerts WHERE status NOT IN ('Resolved', 'FalsePositive')").fetchone()[0]


def test_the_active_count_follows_every_change_and_matches_the_table(tmp_path: Path) -> None:
    path = tmp_path / "detection.db"
    db = DetectionDatabase(path)
    store = AlertStore(db)
    for n in range(50):
        store.save("opened", alert(n))
    assert store.active == 50 == counted(path)
    store.save("updated", alert(3))  # an update never changes the triage status
    assert store.active == 50
    store.set_status("alert-1", "Resolved")
    store.set_status("alert-2", "FalsePositive")
    assert store.active == 48 == counted(path)
    store.save("opened", alert(1))  # the same id opened again over a resolved row counts once more
    assert store.active == 49 == counted(path)
    store.save("opened", alert(4))  # over an active row: no change
    assert store.active == 49 == counted(path)
    store.save("opened", alert(60, status="Resolved"))
    assert store.active == 49 == counted(path)
    db.close()
    reopened = DetectionDatabase(path)
    assert AlertStore(reopened).active == 49
    reopened.close()


def test_triage_ids_only_grow_even_when_the_newest_history_rows_are_deleted(tmp_path: Path) -> None:
    """The cluster's manager sends triage from the last history id it sent: the storage cap deletes closed
    alerts first, often the one just triaged; a change written after that must still get a newer id."""
    db = DetectionDatabase(tmp_path / "detection.db")
    store = AlertStore(db)
    for n in range(3):
        store.save("opened", alert(n))
    store.set_status("alert-0", "Investigating")
    store.set_status("alert-1", "Resolved")
    [*_, (sent, alert_id, status)] = store.triage_after(0)
    assert (alert_id, status) == ("alert-1", "Resolved")
    assert store.delete_oldest(1) == 1  # the cap takes the resolved alert, and its history (the newest row)
    store.set_status("alert-2", "FalsePositive")
    assert [(a, s) for _, a, s in store.triage_after(sent)] == [("alert-2", "FalsePositive")]
    db.close()


def test_detections_are_stored_as_json_dumps_would_write_them(tmp_path: Path) -> None:
    """Each detection's JSON is remembered (an alert is rewritten on every update): the stored text is the same
    as dumping the whole list, also for detections read back from the database and evidence JSON cannot hold."""
    import json

    from appliance.detection.alert_store import _DetectionsJson

    views = [{"id": f"d{i}", "detector": "dpi.tls.raw_ip", "confidence": 0.1 * i, "evidence": {"n": i, "at": Path("/x"),
              "names": ["é", "\u2028"]}, "flow_ids": [f"f{i}"], "first_ns": i, "last_ns": i + 1} for i in range(30)]
    budget = 16 * len(json.dumps(views[0], default=str))  # about 16 texts
    memo = _DetectionsJson(max_chars=budget)
    for window in (views[:10], views[5:25], views[:30], json.loads(json.dumps(views, default=str)), views[28:], []):
        assert memo.dumps(window) == json.dumps(window, default=str)
        assert 0 < memo.remembered_chars <= budget
    # The oldest texts went first: the newest detections are still remembered, as the texts they were.
    assert memo.remembered_chars == sum(len(t) for t in memo._by_id.values())
    assert list(memo._by_id)[-2:] == ["d28", "d29"] and "d0" not in memo._by_id
    db = DetectionDatabase(tmp_path / "detection.db")
    store = AlertStore(db)
    first = alert(1)
    first.detections = views[:3]
    store.save("opened", first)
    first.detections = views[:30]
    store.save("updated", first)
    assert store.get("alert-1").detections == json.loads(json.dumps(views, default=str))
    db.close()


def test_a_batched_store_sees_triage_from_another_connection_at_the_next_round(tmp_path: Path) -> None:
    """The analysis process remembers open alerts and reads PRAGMA data_version once per round (after each
    commit), not once per detection: an alert resolved elsewhere before a round is never updated by it."""
    path = tmp_path / "detection.db"
    db = DetectionDatabase(path)
    store = AlertStore(db, batched=True)
    store.save("opened", alert(1))
    store.commit()
    assert store.find_open("agent-1", "203.0.113.1") is not None  # round 1 reads the version, remembers the alert
    server = AlertStore(DetectionDatabase(path))  # the server process: REST triage on its own connection
    server.set_status("alert-1", "Resolved")
    # Within the round, the remembered alert stands (one version read per round) ...
    assert store.find_open("agent-1", "203.0.113.1") is not None
    store.commit()
    # ... and the next round sees the triage: the resolved alert is not offered for updating.
    assert store.find_open("agent-1", "203.0.113.1") is None
    assert store.find_open("agent-1", "203.0.113.2") is None
    db.close()
