"""Schema migrations of the appliance's SQLite databases (appliance/migrations/).

The upgrade test opens databases written by the release before migrations existed (fixtures/schema_v0.py)
with today's stores: every row is still there, the new tables exist, and the version is the latest.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from appliance.dashboard.accounts import UserStore
from appliance.detection.alert_store import AlertStore
from appliance.detection.analysis_config_store import ConfigStore
from appliance.detection.database import DetectionDatabase
from appliance.detection.exclusions import ExclusionStore
from appliance.enrollment.store import EnrollmentStore
from appliance.migrations import HERE, MigrationError, migrate, migrations
from tests.appliance.fixtures import schema_v0


def version(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])


def tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def write_v0(path: Path, script: str) -> None:
    with sqlite3.connect(path) as conn:
        conn.executescript(script)
    assert version(path) == 0


def latest(database: str) -> int:
    return migrations(HERE / database)[-1][0]


@pytest.mark.parametrize("database", ["detection", "enrollment", "console"])
def test_every_folder_is_numbered_without_gaps(database: str) -> None:
    assert [n for n, _ in migrations(HERE / database)] == list(range(1, latest(database) + 1))


def test_a_new_detection_database_gets_every_table_at_the_latest_version(tmp_path: Path) -> None:
    db = DetectionDatabase(tmp_path / "detection.db")
    db.close()
    assert version(tmp_path / "detection.db") == latest("detection") == 3
    assert {"alerts", "alert_history", "exclusions", "analysis_config", "console_settings"} <= tables(tmp_path / "detection.db")


def test_the_detection_database_of_the_release_before_migrations_is_upgraded_with_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "detection.db"
    write_v0(path, schema_v0.DETECTION)
    db = DetectionDatabase(path)
    try:
        assert version(path) == latest("detection")
        alerts = AlertStore(db)
        old = alerts.get("a1b2c3d4e5f60718")
        assert old is not None and old.status == "New" and old.indicator == "exfil.example.net"
        assert alerts.active == 2
        # The new table works on the old rows: triage of a pre-migration alert is recorded with its actor.
        alerts.set_status("a1b2c3d4e5f60718", "Investigating", actor="analyst1", note="looking")
        assert [h["actor"] for h in alerts.history("a1b2c3d4e5f60718")] == ["analyst1"]
        assert [e.value for e in ExclusionStore(db).all()] == ["198.51.100.0/24"]
        assert ConfigStore(db).load() == {"correlation": {"min_confidence": 0.7}}
    finally:
        db.close()
    with sqlite3.connect(path, isolation_level=None) as conn:  # an up-to-date database: nothing to apply
        assert migrate(conn, "detection") == []
    assert version(path) == latest("detection")


def test_the_enrollment_database_of_the_release_before_migrations_keeps_its_tokens_and_certificates(tmp_path: Path) -> None:
    path = tmp_path / "enrollment.db"
    write_v0(path, schema_v0.ENROLLMENT)
    store = EnrollmentStore(path)
    try:
        assert version(path) == latest("enrollment")
        assert store.token_counts(time.time() - 10 * 365 * 86400)["unused"] == 1
        [cert] = store.certificates()
        assert (cert.agent_id, cert.machine_id, cert.common_name) == ("agent-7", "machine-7", "agent-7")
    finally:
        store.close()


def test_the_console_accounts_survive_the_upgrade(tmp_path: Path) -> None:
    path = tmp_path / "console.sqlite3"
    first = UserStore(path)
    first.create("ana", "a long enough password 1", "analyst")
    first.close()
    with sqlite3.connect(path) as conn:  # as the console wrote it before migrations existed
        conn.execute("PRAGMA user_version = 0")
    again = UserStore(path)
    try:
        assert version(path) == latest("console")
        assert again.authenticate("ana", "a long enough password 1") is not None
    finally:
        again.close()


def test_a_database_from_a_newer_release_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "detection.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE future (x)")
        conn.execute("PRAGMA user_version = 99")
    with pytest.raises(MigrationError, match="schema version 99, newer than this appliance knows"):
        DetectionDatabase(path)
    assert tables(path) == {"future"} and version(path) == 99


def test_a_failing_migration_leaves_the_database_at_the_last_whole_version(tmp_path: Path) -> None:
    folder = tmp_path / "migrations"
    folder.mkdir()
    (folder / "0001_first.sql").write_text("CREATE TABLE a (x);")
    (folder / "0002_broken.sql").write_text("CREATE TABLE b (x);\nINSERT INTO nowhere VALUES (1);")
    conn = sqlite3.connect(tmp_path / "t.db", isolation_level=None)
    with pytest.raises(MigrationError, match="0002_broken.sql failed"):
        migrate(conn, "test", folder)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    assert {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")} == {"a"}
    (folder / "0002_broken.sql").write_text("CREATE TABLE b (x);")
    assert migrate(conn, "test", folder) == [2]


def test_numbering_gaps_are_refused(tmp_path: Path) -> None:
    (tmp_path / "0001_a.sql").write_text("")
    (tmp_path / "0003_c.sql").write_text("")
    with pytest.raises(MigrationError, match="without gaps"):
        migrations(tmp_path)


def test_triage_history_keeps_its_rows_and_ids_when_ids_become_never_reused(tmp_path: Path) -> None:
    """Migration 0003: alert_history gets an AUTOINCREMENT id; rows keep their rowids as ids (a cursor taken
    before the upgrade stays right) and the next id is past every id ever used."""
    folder = tmp_path / "v2"
    folder.mkdir()
    for number, path in migrations(HERE / "detection"):
        if number <= 2:
            (folder / path.name).write_text(path.read_text())
    path = tmp_path / "detection.db"
    with sqlite3.connect(path, isolation_level=None) as conn:
        assert migrate(conn, "detection", folder) == [1, 2]
        conn.executemany("INSERT INTO alert_history VALUES (?, ?, ?, ?, ?, ?)",
                         [(f"a{i}", float(i), "analyst1", "New", "Investigating", "") for i in range(1, 6)])
        conn.execute("DELETE FROM alert_history WHERE rowid = 3")
    db = DetectionDatabase(path)
    try:
        assert version(path) == latest("detection")
        rows = db.conn.execute("SELECT id, alert_id FROM alert_history ORDER BY id").fetchall()
        assert rows == [(1, "a1"), (2, "a2"), (4, "a4"), (5, "a5")]
        db.conn.execute("DELETE FROM alert_history WHERE id = 5")
        db.conn.execute("INSERT INTO alert_history (alert_id, at, actor, from_status, to_status, note) "
                        "VALUES ('a6', 6.0, 'analyst1', 'New', 'Resolved', '')")
        assert db.conn.execute("SELECT MAX(id) FROM alert_history").fetchone()[0] == 6  # 5 is never handed out again
        db.conn.commit()
    finally:
        db.close()
