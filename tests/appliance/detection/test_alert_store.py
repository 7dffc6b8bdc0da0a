"""AlertStore's active count: kept by each save (never a scan of the table per alert) and always equal to
what the table says."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

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


def test_a_batched_store_asks_the_table_only_about_pairs_with_an_open_alert(tmp_path: Path, monkeypatch) -> None:
    """The analysis process reads which (agent, indicator) pairs have an open alert when another connection has
    committed (at most once a second): a pair with none costs no query, a pair opened or reopened elsewhere is
    still found, and so is one this store reopens itself (its own commits do not move data_version)."""
    from appliance.detection import alert_store

    path = tmp_path / "detection.db"
    server = AlertStore(DetectionDatabase(path))  # the server process's connection
    server.save("opened", alert(1))
    server.save("opened", alert(2, status="Resolved"))
    db = DetectionDatabase(path)
    store = AlertStore(db, batched=True)
    statements: list[str] = []
    db.conn.set_trace_callback(statements.append)

    def row_queries() -> int:
        return sum("WHERE agent_id = '" in s for s in statements)  # (the trace shows the values bound)

    assert store.find_open("agent-1", "203.0.113.1").id == "alert-1"
    assert row_queries() == 1 and any(s.startswith("SELECT DISTINCT agent_id, indicator") for s in statements)
    assert store.find_open("agent-1", "203.0.113.2") is None  # resolved: no open alert, no query
    assert store.find_open("agent-9", "198.51.100.7") is None  # never seen: no query
    assert row_queries() == 1
    store.commit()

    server.set_status("alert-2", "New")  # reopened elsewhere, within the second: the pairs are not read again ...
    assert store.find_open("agent-1", "203.0.113.2").id == "alert-2"  # ... so the table is asked, and knows
    store.commit()
    monkeypatch.setattr(alert_store, "_OPEN_PAIRS_EVERY", 0.0)
    statements.clear()
    assert store.find_open("agent-9", "198.51.100.7") is None  # the put-off read happens at the next round
    assert row_queries() == 0 and any(s.startswith("SELECT DISTINCT") for s in statements)
    store.commit()

    server.save("opened", alert(3))  # opened elsewhere: read with the pairs at the next round
    statements.clear()
    assert store.find_open("agent-1", "203.0.113.3").id == "alert-3"
    assert store.find_open("agent-1", "203.0.113.4") is None and row_queries() == 1
    store.commit()

    server.save("opened", alert(5, status="Resolved"))
    assert store.find_open("agent-1", "203.0.113.5") is None  # the pairs read again: none open for it
    store.commit()
    assert store.take_status("alert-5", "New")  # this store's own change (the cluster's analyzers take triage)
    store.commit()
    assert store.find_open("agent-1", "203.0.113.5").id == "alert-5"
    assert store.take_status("alert-5", "Resolved")
    store.commit()
    assert store.find_open("agent-1", "203.0.113.5") is None
    db.close()


def test_a_batched_store_with_too_many_open_pairs_asks_the_table_and_counts_again_a_minute_later(
        tmp_path: Path, monkeypatch) -> None:
    from appliance.detection import alert_store

    monkeypatch.setattr(alert_store, "_OPEN_REMEMBERED", 3)
    path = tmp_path / "detection.db"
    server = AlertStore(DetectionDatabase(path))
    for n in range(5):
        server.save("opened", alert(n))
    db = DetectionDatabase(path)
    store = AlertStore(db, batched=True)
    statements: list[str] = []
    db.conn.set_trace_callback(statements.append)
    assert store.find_open("agent-9", "198.51.100.7") is None
    assert store.find_open("agent-1", "203.0.113.4").id == "alert-4"
    assert sum("WHERE agent_id = '" in s for s in statements) == 2  # every pair asked about
    store.commit()
    statements.clear()
    assert store.find_open("agent-9", "198.51.100.8") is None
    assert not any(s.startswith("SELECT DISTINCT") for s in statements)  # not counted again every round
    db.close()


def _rows(path: Path) -> list[tuple]:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT * FROM alerts ORDER BY id").fetchall()


@pytest.mark.parametrize("remembered", [4, 100_000])
def test_a_batched_store_writes_each_alert_once_per_round_leaving_the_rows_saving_each_would(tmp_path: Path, monkeypatch,
                                                                                             remembered: int) -> None:
    """The correlator saves a busy alert once per detection; the analysis process's store writes it once per
    round, as last saved, and the rows after each commit are the ones writing every save would leave. Any
    statement of the store before the commit (a read, triage, the active count) sees the saves first, and so
    does find_open when its memory of open alerts is full and starts again."""
    import random

    from appliance.detection import alert_store

    monkeypatch.setattr(alert_store, "_OPEN_REMEMBERED", remembered)
    rng = random.Random(5)
    each_db, batched_db = DetectionDatabase(tmp_path / "each.db"), DetectionDatabase(tmp_path / "batched.db")
    each, batched = AlertStore(each_db), AlertStore(batched_db, batched=True)
    statements: list[str] = []
    batched_db.conn.set_trace_callback(statements.append)
    opened: list[Alert] = []
    for round_ in range(40):
        statements.clear()
        saves = 0
        for _ in range(rng.randint(0, 12)):
            if not opened or rng.random() < 0.3:
                new = alert(len(opened))
                new.detections = [{"id": f"d{len(opened)}-0", "n": 0}]
                opened.append(new)
                event, saved = "opened", new
            else:
                chosen = rng.choice(opened)
                saved = Alert(*(getattr(chosen, f) for f in Alert.__slots__))  # the correlator's copy
                saved.detections = [*saved.detections, {"id": f"d{saved.id}-{round_}-{saves}", "n": saves}]
                saved.detection_count += 1
                saved.last_ns += rng.randint(1, 9)
                saved.summary = f"round {round_}"
                saved.updated_at += 1
                opened[opened.index(chosen)] = saved
                event = "updated"
            saves += 1
            asked = rng.choice(opened + [alert(999)])  # the correlator asks before it saves
            assert batched.find_open(asked.agent_id, asked.indicator) == each.find_open(asked.agent_id, asked.indicator)
            each.save(event, saved)
            batched.save(event, saved)
        if rng.random() < 0.2 and opened:  # a statement inside the round sees every save before it
            assert batched.get(opened[-1].id) == each.get(opened[-1].id)
            assert batched.active == each.active
        batched.commit()
        assert _rows(tmp_path / "batched.db") == _rows(tmp_path / "each.db")
        written = [s for s in statements if s.startswith(("INSERT", "UPDATE"))]
        if remembered > 4:  # (a full memory of open alerts writes the saves so far, to start again)
            assert len(written) <= len({a.id for a in opened}) and len(written) <= saves
    assert batched.active == each.active == len(opened)
    batched.set_status(opened[0].id, "Resolved")  # triage mid-round: the pending update lands first, status stays
    update = Alert(*(getattr(opened[1], f) for f in Alert.__slots__))
    update.summary = "after triage"
    batched.save("updated", update)
    batched.set_status(opened[1].id, "Investigating")
    batched.commit()
    assert batched.get(opened[1].id).summary == "after triage" and batched.get(opened[1].id).status == "Investigating"
    each_db.close()
    batched_db.close()
