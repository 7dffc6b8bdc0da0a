"""Alerts and their triage history in the detection database (SQLite, WAL)."""

from __future__ import annotations

import json
import operator
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields
from typing import Any

from appliance.detection.alert import Alert
from appliance.detection.alert_query import STATUSES, AlertFilter, AlertOrder
from appliance.detection.database import DetectionDatabase
from appliance.detection.triage import CLOSED, TRANSITIONS, InvalidTransition


_COLUMNS = ("id, agent_id, indicator, category, severity, confidence, summary, first_ns, last_ns, status, "
            "detections, detection_count, created_at, updated_at")


_OPEN_REMEMBERED = 100_000  # (agent, indicator) pairs a batched store remembers; then it starts again
# A batched store reads which pairs have an open alert (one scan of the alerts_group index) when another connection
# has committed, at most this often (seconds); between reads after a change, it asks the table for every pair.
_OPEN_PAIRS_EVERY = 1.0


_ALERT_FIELDS = tuple(f.name for f in fields(Alert))
# What json.dumps(view, default=str) does, without building an encoder per call (a third of its cost), and without
# the check for cycles: a view is a tree the detectors build from values (dicts, lists, strings, numbers), and the
# check was a quarter of what is left (6.6 -> 5.0 us a view, the corpus's 192 views replayed, 2026-12-02).
_encode = json.JSONEncoder(default=str, check_circular=False).encode


_alert_values = operator.attrgetter(*_ALERT_FIELDS)  # every field, in order, in one C call


def _copy(alert: Alert) -> Alert:
    """The correlator changes the alert it is given: never the remembered one (or one a subscriber holds)."""
    copied = Alert(*_alert_values(alert))
    copied.detections = list(alert.detections)
    return copied


class _DetectionsJson:
    """The JSON of an alert's detection list, each detection serialized once.

    An alert keeps its last 100 detections and is written again on every update: with each detection's text
    remembered, an update dumps only what is new instead of all it keeps. A detection's view never changes
    once made, so its text is remembered by its id (one analysis makes: detections.DetectionIds, never one an
    agent chooses); the joined text is what json.dumps gives for the list.

    The memory is bounded by characters, not entries, and forgets the oldest texts first: what it must hold
    is every detection of the alerts still being updated. Bounded at 10,000 entries and emptied when full,
    a storm of 4,096 alerts updated in turn missed nearly every time (55,000 dumps for 20,000 detections;
    appliance bench workload, 72 -> 62 us per flow with it held, 2026-11-24).
    """

    def __init__(self, max_chars: int = 24 << 20) -> None:
        self._max_chars = max_chars
        self._chars = 0
        self._by_id: dict[str, str] = {}

    def dumps(self, detections: list[dict[str, Any]]) -> str:
        parts = []
        by_id = self._by_id
        for view in detections:
            key = view.get("id")
            text = by_id.get(key) if type(key) is str else None
            if text is None:
                text = _encode(view)
                if type(key) is str:
                    by_id[key] = text
                    self._chars += len(text)
                    if self._chars > self._max_chars:
                        self._forget_oldest()
            parts.append(text)
        return "[" + ", ".join(parts) + "]"

    def _forget_oldest(self) -> None:
        """Down to three quarters of the budget, oldest first (dicts keep insertion order), in one pass."""
        target = self._max_chars * 3 // 4
        freed, dropped = 0, []
        for key, text in self._by_id.items():
            if self._chars - freed <= target:
                break
            freed += len(text)
            dropped.append(key)
        for key in dropped:
            del self._by_id[key]
        self._chars -= freed

    @property
    def remembered_chars(self) -> int:
        return self._chars


_INSERT_HISTORY = ("INSERT INTO alert_history (alert_id, at, actor, from_status, to_status, note) "
                   "VALUES (?, ?, ?, ?, ?, ?)")


class AlertStore:
    """Alerts and their triage status in SQLite (WAL); survives restarts, including unclean ones."""

    def __init__(self, db: DetectionDatabase, shared: bool = False, batched: bool = False) -> None:
        self._db = db
        # batched: the analysis process, the only writer of alerts, whose connection nothing else
        # uses. Its saves are committed by `commit()` once per round of flows instead of one
        # transaction each, and open alerts are looked up in memory: both were half of the cost of
        # correlation. The memory is forgotten whenever another connection commits (triage, deletions
        # by REST or retention move PRAGMA data_version, read once per round), so an alert resolved
        # before a round is never updated by it.
        self._batched = batched
        # A batched store writes each alert once per round, as it was last saved (a busy alert is saved once
        # per detection): alert id -> [event, alert], in the order first saved; written before any statement
        # of this store runs, and by `commit()`.
        self._pending: dict[str, list[Any]] = {}
        self._detections_json = _DetectionsJson()
        self._uncommitted = False
        self._open: dict[tuple[str, str], Alert | None] = {}
        self._open_version = -1
        # The pairs with an open alert in the table as of _open_version, and every pair this store saved open
        # since: a pair not in it has none, and costs no query (new pairs were 46 queries a pass of the bench
        # corpus, 14 us each). A superset is harmless (a query finds nothing); None: not known, ask the table.
        self._open_pairs: set[tuple[str, str]] | None = None
        self._open_pairs_at = float("-inf")  # monotonic time of the last read
        self._version_checked = False  # PRAGMA data_version read this round (one read per round, not per alert)
        # shared: another process saves the alerts (the analysis process), so this one's count cannot
        # follow its own saves; it is counted again whenever SQLite says another connection committed
        # (PRAGMA data_version moves only then, and reading it costs no table scan).
        self._shared = shared
        self._version = self._data_version() if shared else 0
        self._active = self._count_active()

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """The database lock, the batched saves written first: every read and change of this store sees them."""
        with self._db.lock:
            if self._pending:
                self._write_pending()
            yield

    def _flush(self) -> None:
        """Write the batched saves now (under the lock), so that a count or a look-up sees them."""
        with self._locked():
            pass

    def _write_pending(self) -> None:
        pending, self._pending = self._pending, {}
        for event, alert in pending.values():
            self._write(event, alert)
        self._uncommitted = True

    def _data_version(self) -> int:
        with self._db.lock:
            return int(self._db.conn.execute("PRAGMA data_version").fetchone()[0])

    def _count_active(self) -> int:
        """Counted over the table: at start-up and after triage or deletions, never per saved alert."""
        with self._locked():
            row = self._db.conn.execute(
                "SELECT COUNT(*) FROM alerts WHERE status NOT IN ('Resolved', 'FalsePositive')").fetchone()
        return int(row[0])

    @property
    def active(self) -> int:
        """Alerts not Resolved or FalsePositive."""
        if self._pending:  # the batched saves move the count as they are written
            self._flush()
        if self._shared:
            version = self._data_version()
            if version != self._version:
                self._version = version
                self._active = self._count_active()
        return self._active

    def _row(self, alert: Alert) -> tuple[Any, ...]:
        return (alert.id, alert.agent_id, alert.indicator, alert.category, alert.severity, alert.confidence,
                alert.summary, alert.first_ns, alert.last_ns, alert.status, self._detections_json.dumps(alert.detections),
                alert.detection_count, alert.created_at, alert.updated_at)

    @staticmethod
    def _alert(row: tuple[Any, ...]) -> Alert:
        return Alert(id=row[0], agent_id=row[1], indicator=row[2], category=row[3], severity=row[4], confidence=row[5],
                     summary=row[6], first_ns=row[7], last_ns=row[8], status=row[9], detections=json.loads(row[10]),
                     detection_count=row[11], created_at=row[12], updated_at=row[13])

    def save(self, event: str, alert: Alert) -> None:
        """Channel subscriber: insert an opened alert; update an updated one without touching its triage
        status, which an analyst may have changed since the correlator read it."""
        if self._batched:
            # Written by the next statement or commit, as last saved: an alert opened then updated in one round
            # is inserted with its last state (the row INSERT then UPDATE would leave: an update changes no
            # column an insert sets otherwise). The alert as saved (the correlator never changes one it
            # published; it changes copies).
            pending = self._pending.get(alert.id)
            if pending is None:
                self._pending[alert.id] = [event, alert]
            else:
                pending[0] = "opened" if "opened" in (pending[0], event) else event
                pending[1] = alert
            key = (alert.agent_id, alert.indicator)
            if alert.status not in CLOSED:
                self._open[key] = alert
                if self._open_pairs is not None:
                    self._open_pairs.add(key)
            else:
                self._open[key] = None
            return
        with self._locked(), self._db.conn:
            self._write(event, alert)

    def commit(self) -> None:
        """Commit the saves of a batched store (the analysis process, after each round of flows); the next
        round looks again whether another connection committed (triage, deletions)."""
        if self._pending or self._uncommitted:
            with self._locked():
                self._db.conn.commit()
            self._uncommitted = False
        self._version_checked = False

    def next_round(self) -> None:
        """A round of flows ends without a commit (the next follows at once): it still looks again whether another
        connection committed."""
        self._version_checked = False

    def _write(self, event: str, alert: Alert) -> None:
        if event == "opened":
            # The active count moves by this one row: a COUNT over the table on every save made
            # correlation slower with every alert ever stored (quadratic over a busy day).
            before = self._db.conn.execute("SELECT status FROM alerts WHERE id = ?", (alert.id,)).fetchone()
            self._db.conn.execute(f"INSERT OR REPLACE INTO alerts ({_COLUMNS}) VALUES ({', '.join('?' * 14)})",
                                  self._row(alert))
            self._active += (alert.status not in CLOSED) - (before is not None and before[0] not in CLOSED)
        else:
            self._db.conn.execute(
                "UPDATE alerts SET category = ?, severity = ?, confidence = ?, summary = ?, first_ns = ?, last_ns = ?, "
                "detections = ?, detection_count = ?, updated_at = ? WHERE id = ?",
                (alert.category, alert.severity, alert.confidence, alert.summary, alert.first_ns, alert.last_ns,
                 self._detections_json.dumps(alert.detections), alert.detection_count, alert.updated_at, alert.id))

    def get(self, alert_id: str) -> Alert | None:
        with self._locked():
            row = self._db.conn.execute(f"SELECT {_COLUMNS} FROM alerts WHERE id = ?", (alert_id,)).fetchone()
        return self._alert(row) if row else None

    def find_open(self, agent_id: str, indicator: str) -> Alert | None:
        if self._batched:
            if not self._version_checked:  # once per round: triage between rounds is seen by the next one
                self._version_checked = True
                version = self._data_version()
                if version != self._open_version:
                    self._forget_open()
                    self._open_version = version
                    self._open_pairs = self._read_open_pairs()
                elif self._open_pairs is None:  # a read put off by the rate limit, or dropped by an own change
                    self._open_pairs = self._read_open_pairs()
            key = (agent_id, indicator)
            if key in self._open:
                cached = self._open[key]
                return _copy(cached) if cached is not None else None
            pairs = self._open_pairs
            found = self._find_open(agent_id, indicator) if pairs is None or key in pairs else None
            if len(self._open) >= _OPEN_REMEMBERED:
                self._forget_open()
            self._open[key] = found
            return _copy(found) if found is not None else None
        return self._find_open(agent_id, indicator)

    def _read_open_pairs(self) -> set[tuple[str, str]] | None:
        """The pairs with an open alert in the table (the saves not yet written first); None when the last read was
        under _OPEN_PAIRS_EVERY ago (a connection committing often costs one scan a second, not one a round) or
        when there are more than _OPEN_REMEMBERED (then not read again for a minute)."""
        now = time.monotonic()
        if now - self._open_pairs_at < _OPEN_PAIRS_EVERY:
            return None
        self._open_pairs_at = now
        with self._locked():
            rows = self._db.conn.execute(
                "SELECT DISTINCT agent_id, indicator FROM alerts WHERE status NOT IN ('Resolved', 'FalsePositive') "
                "LIMIT ?", (_OPEN_REMEMBERED + 1,)).fetchall()
        if len(rows) > _OPEN_REMEMBERED:
            self._open_pairs_at = now + 59 * _OPEN_PAIRS_EVERY  # that many stay so for a while: tried again in a minute
            return None
        return set(rows)

    def _forget_own_changes(self) -> None:
        """This connection changed alerts itself (triage, deletions): its commits do not move data_version, so the
        memory of open alerts and pairs is dropped here, and read again at the next round."""
        self._open.clear()
        self._open_pairs = None
        self._open_version = -1

    def _forget_open(self) -> None:
        """Empty the memory of open alerts; the saves not yet written first, so that the table holds them."""
        if self._pending:
            self._flush()
        self._open.clear()

    def _find_open(self, agent_id: str, indicator: str) -> Alert | None:
        # Without writing the batched saves: each is remembered in _open (`_forget_open` writes them first),
        # so the table is asked only about pairs none of them is for.
        with self._db.lock:
            row = self._db.conn.execute(
                f"SELECT {_COLUMNS} FROM alerts WHERE agent_id = ? AND indicator = ? "
                "AND status NOT IN ('Resolved', 'FalsePositive') ORDER BY last_ns DESC LIMIT 1",
                (agent_id, indicator)).fetchone()
        return self._alert(row) if row else None

    def query(self, *, agent_id: str | None = None, category: str | None = None, severity: int | None = None,
              status: str | None = None, limit: int = 100) -> list[Alert]:
        """Newest first (by last seen)."""
        clauses, params = [], []
        for column, value in (("agent_id", agent_id), ("category", category), ("severity", severity), ("status", status)):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        with self._locked():
            rows = self._db.conn.execute(
                f"SELECT {_COLUMNS} FROM alerts {where} ORDER BY last_ns DESC, updated_at DESC LIMIT ?",
                (*params, limit)).fetchall()
        return [self._alert(r) for r in rows]

    def set_status(self, alert_id: str, status: str, *, actor: str = "admin-token", note: str = "") -> Alert | None:
        """Apply a triage transition and record it; None when there is no such alert; InvalidTransition when not allowed."""
        self._forget_own_changes()
        with self._locked(), self._db.conn:
            row = self._db.conn.execute("SELECT status FROM alerts WHERE id = ?", (alert_id,)).fetchone()
            if row is None:
                return None
            if status not in TRANSITIONS[row[0]]:
                raise InvalidTransition(row[0], status)
            now = time.time()
            self._db.conn.execute("UPDATE alerts SET status = ?, updated_at = ? WHERE id = ?", (status, now, alert_id))
            self._db.conn.execute(_INSERT_HISTORY,
                                  (alert_id, now, actor, row[0], status, note))
        self._active = self._count_active()
        return self.get(alert_id)

    def triage_after(self, rowid: int, limit: int = 1000) -> list[tuple[int, str, str]]:
        """Triage changes recorded after history row `rowid`, oldest first: (row id, alert id, new status). The
        cluster's manager passes them on to the analyzers; ids only grow (AUTOINCREMENT, migration 0003)."""
        with self._locked():
            rows = self._db.conn.execute("SELECT id, alert_id, to_status FROM alert_history WHERE id > ? "
                                         "ORDER BY id LIMIT ?", (rowid, limit)).fetchall()
        return [(int(r[0]), str(r[1]), str(r[2])) for r in rows]

    def take_status(self, alert_id: str, status: str) -> bool:
        """Set the status the manager's analyst chose (a cluster analyzer; no transition check, no history
        here: both are the manager's). True when this store holds the alert."""
        self._forget_own_changes()
        with self._locked():
            changed = self._db.conn.execute("UPDATE alerts SET status = ? WHERE id = ?", (status, alert_id)).rowcount
            if not self._batched:
                self._db.conn.commit()
            else:
                self._uncommitted = True
        self._active = self._count_active()
        return bool(changed)

    def history(self, alert_id: str) -> list[dict[str, Any]]:
        """Triage changes of one alert, oldest first: {at (epoch s), actor, from, to, note}."""
        with self._locked():
            rows = self._db.conn.execute(
                "SELECT at, actor, from_status, to_status, note FROM alert_history WHERE alert_id = ? ORDER BY at, rowid",
                (alert_id,)).fetchall()
        return [{"at": r[0], "actor": r[1], "from": r[2], "to": r[3], "note": r[4]} for r in rows]

    # -- the console's queries ----------------------------------------------------------------
    def search(self, flt: AlertFilter, order: AlertOrder, limit: int) -> tuple[list[Alert], str | None, int]:
        """One page in `order` after its cursor; returns (alerts, next cursor or None, total matches)."""
        clauses, params = flt.where()
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        after, order_by, after_params = order.sql()
        page_clauses = [*clauses, after] if after else clauses
        page_where = f"WHERE {' AND '.join(page_clauses)}" if page_clauses else ""
        with self._locked():
            total = int(self._db.conn.execute(f"SELECT COUNT(*) FROM alerts {where}", params).fetchone()[0])
            rows = self._db.conn.execute(f"SELECT {_COLUMNS} FROM alerts {page_where} {order_by} LIMIT ?",
                                         (*params, *after_params, limit + 1)).fetchall()
        alerts = [self._alert(r) for r in rows[:limit]]
        cursor = None
        if len(rows) > limit and alerts:
            last = alerts[-1]
            value = {"last_ns": last.last_ns, "first_ns": last.first_ns, "severity": last.severity}[order.column]
            cursor = order.cursor_for(value, last.id)
        return alerts, cursor, total

    def groups(self, flt: AlertFilter, limit: int, sample: int = 10) -> list[dict[str, Any]]:
        """Matches grouped by category + agent + indicator, newest group first."""
        clauses, params = flt.where()
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        status_sums = ", ".join(f"SUM(status = '{s}')" for s in STATUSES)
        with self._locked():
            rows = self._db.conn.execute(
                f"SELECT category, agent_id, indicator, COUNT(*), MIN(first_ns), MAX(last_ns), MAX(severity), {status_sums} "
                f"FROM alerts {where} GROUP BY category, agent_id, indicator ORDER BY MAX(last_ns) DESC LIMIT ?",
                (*params, limit)).fetchall()
            ids = self._db.conn.execute(
                f"SELECT category, agent_id, indicator, id FROM (SELECT category, agent_id, indicator, id, ROW_NUMBER() "
                f"OVER (PARTITION BY category, agent_id, indicator ORDER BY last_ns DESC, id DESC) AS n FROM alerts {where}) "
                "WHERE n <= ?", (*params, sample)).fetchall()
        samples: dict[tuple[str, str, str], list[str]] = {}
        for category, agent_id, indicator, alert_id in ids:
            samples.setdefault((category, agent_id, indicator), []).append(alert_id)
        return [{"category": r[0], "agent_id": r[1], "indicator": r[2], "count": r[3], "first_ns": r[4], "last_ns": r[5],
                 "severity": r[6], "statuses": {s: int(n or 0) for s, n in zip(STATUSES, r[7:]) if n},
                 "alert_ids": samples.get((r[0], r[1], r[2]), [])} for r in rows]

    def matching(self, flt: AlertFilter, cap: int) -> list[Alert]:
        """Every match (at most `cap`), newest first: what an export writes."""
        clauses, params = flt.where()
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        with self._locked():
            rows = self._db.conn.execute(f"SELECT {_COLUMNS} FROM alerts {where} ORDER BY last_ns DESC, id DESC LIMIT ?",
                                         (*params, cap)).fetchall()
        return [self._alert(r) for r in rows]

    def bulk_status(self, flt: AlertFilter, status: str, *, actor: str, note: str = "") -> dict[str, int]:
        """Move every match that may go to `status` there, in one transaction; the others are counted as skipped."""
        self._forget_own_changes()
        clauses, params = flt.where()
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        allowed_from = [s for s, targets in TRANSITIONS.items() if status in targets]
        with self._locked(), self._db.conn:
            rows = self._db.conn.execute(f"SELECT id, status FROM alerts {where}", params).fetchall()
            now = time.time()
            movable = [(alert_id, current) for alert_id, current in rows if current in allowed_from]
            self._db.conn.executemany("UPDATE alerts SET status = ?, updated_at = ? WHERE id = ?",
                                      [(status, now, alert_id) for alert_id, _ in movable])
            self._db.conn.executemany(_INSERT_HISTORY,
                                      [(alert_id, now, actor, current, status, note) for alert_id, current in movable])
        self._active = self._count_active()
        return {"matched": len(rows), "changed": len(movable), "skipped": len(rows) - len(movable)}

    # -- retention ----------------------------------------------------------------------------
    def delete_older_than(self, cutoff: float) -> int:
        """Delete alerts last changed before `cutoff` (epoch seconds) with their history."""
        self._forget_own_changes()
        with self._locked(), self._db.conn:
            self._db.conn.execute(
                "DELETE FROM alert_history WHERE alert_id IN (SELECT id FROM alerts WHERE updated_at < ?)", (cutoff,))
            deleted = self._db.conn.execute("DELETE FROM alerts WHERE updated_at < ?", (cutoff,)).rowcount
        self._active = self._count_active()
        return int(deleted)

    def delete_oldest(self, count: int) -> int:
        """Delete the `count` least recently changed alerts, closed ones first (the storage cap)."""
        self._forget_own_changes()
        with self._locked(), self._db.conn:
            ids = [r[0] for r in self._db.conn.execute(
                "SELECT id FROM alerts ORDER BY status IN ('Resolved', 'FalsePositive') DESC, updated_at ASC LIMIT ?",
                (count,)).fetchall()]
            self._db.conn.executemany("DELETE FROM alert_history WHERE alert_id = ?", [(i,) for i in ids])
            self._db.conn.executemany("DELETE FROM alerts WHERE id = ?", [(i,) for i in ids])
        self._active = self._count_active()
        return len(ids)

    def delete(self, alert_id: str) -> bool:
        self._forget_own_changes()
        with self._locked(), self._db.conn:
            self._db.conn.execute("DELETE FROM alert_history WHERE alert_id = ?", (alert_id,))
            deleted = self._db.conn.execute("DELETE FROM alerts WHERE id = ?", (alert_id,)).rowcount
        self._active = self._count_active()
        return bool(deleted)
