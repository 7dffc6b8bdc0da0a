"""Alerts: the model, the triage state machine, the channel that delivers them, and their store."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from appliance.detection.database import DetectionDatabase
from appliance.errors import ApplianceError

log = logging.getLogger(__name__)

STATUSES = ("New", "Acknowledged", "Investigating", "Resolved", "FalsePositive")
CLOSED = frozenset({"Resolved", "FalsePositive"})
# Triage transitions an analyst may make; a closed alert can only be reopened as New.
TRANSITIONS: dict[str, frozenset[str]] = {
    "New": frozenset({"Acknowledged", "Investigating", "Resolved", "FalsePositive"}),
    "Acknowledged": frozenset({"Investigating", "Resolved", "FalsePositive"}),
    "Investigating": frozenset({"Acknowledged", "Resolved", "FalsePositive"}),
    "Resolved": frozenset({"New"}),
    "FalsePositive": frozenset({"New"}),
}
MAX_DETECTIONS_KEPT = 100


class InvalidTransition(ApplianceError):
    """The requested triage status cannot follow the alert's current one."""

    def __init__(self, current: str, wanted: str) -> None:
        allowed = ", ".join(sorted(TRANSITIONS[current])) or "none"
        super().__init__(f"cannot move an alert from {current} to {wanted} (allowed: {allowed})")


@dataclass(slots=True)
class Alert:
    """A correlated alert about one agent and one indicator."""

    id: str
    agent_id: str
    indicator: str
    category: str
    severity: int  # Severity value
    confidence: float
    summary: str
    first_ns: int
    last_ns: int
    status: str = "New"
    detections: list[dict[str, Any]] = field(default_factory=list)
    detection_count: int = 0
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)

    @staticmethod
    def new_id() -> str:
        return str(uuid.uuid4())


class AlertChannel:
    """Delivers every opened or updated alert to its subscribers (the store first, exporters later)."""

    def __init__(self) -> None:
        self._subscribers: list[Callable[[str, Alert], None]] = []
        self.delivery_errors = 0

    def subscribe(self, subscriber: Callable[[str, Alert], None]) -> None:
        self._subscribers.append(subscriber)

    def publish(self, event: str, alert: Alert) -> None:
        """`event` is "opened" or "updated"; a failing subscriber is counted and logged, the others still run."""
        for subscriber in self._subscribers:
            try:
                subscriber(event, alert)
            except Exception:
                self.delivery_errors += 1
                log.exception("alert subscriber failed event=%s alert=%s", event, alert.id)


_COLUMNS = ("id, agent_id, indicator, category, severity, confidence, summary, first_ns, last_ns, status, "
            "detections, detection_count, created_at, updated_at")


class AlertStore:
    """Alerts and their triage status in SQLite (WAL); survives restarts, including unclean ones."""

    def __init__(self, db: DetectionDatabase) -> None:
        self._db = db
        with db.lock, db.conn:
            db.conn.execute(
                "CREATE TABLE IF NOT EXISTS alerts (id TEXT PRIMARY KEY, agent_id TEXT NOT NULL, indicator TEXT NOT NULL, "
                "category TEXT NOT NULL, severity INTEGER NOT NULL, confidence REAL NOT NULL, summary TEXT NOT NULL, "
                "first_ns INTEGER NOT NULL, last_ns INTEGER NOT NULL, status TEXT NOT NULL, detections TEXT NOT NULL, "
                "detection_count INTEGER NOT NULL, created_at REAL NOT NULL, updated_at REAL NOT NULL)")
            db.conn.execute("CREATE INDEX IF NOT EXISTS alerts_group ON alerts (agent_id, indicator, status)")
            db.conn.execute("CREATE INDEX IF NOT EXISTS alerts_last ON alerts (last_ns)")
        self._active = self._count_active()

    def _count_active(self) -> int:
        with self._db.lock:
            row = self._db.conn.execute(
                "SELECT COUNT(*) FROM alerts WHERE status NOT IN ('Resolved', 'FalsePositive')").fetchone()
        return int(row[0])

    @property
    def active(self) -> int:
        """Alerts not Resolved or FalsePositive."""
        return self._active

    @staticmethod
    def _row(alert: Alert) -> tuple[Any, ...]:
        return (alert.id, alert.agent_id, alert.indicator, alert.category, alert.severity, alert.confidence,
                alert.summary, alert.first_ns, alert.last_ns, alert.status, json.dumps(alert.detections, default=str),
                alert.detection_count, alert.created_at, alert.updated_at)

    @staticmethod
    def _alert(row: tuple[Any, ...]) -> Alert:
        return Alert(id=row[0], agent_id=row[1], indicator=row[2], category=row[3], severity=row[4], confidence=row[5],
                     summary=row[6], first_ns=row[7], last_ns=row[8], status=row[9], detections=json.loads(row[10]),
                     detection_count=row[11], created_at=row[12], updated_at=row[13])

    def save(self, event: str, alert: Alert) -> None:
        """Channel subscriber: insert an opened alert; update an updated one without touching its triage
        status, which an analyst may have changed since the correlator read it."""
        with self._db.lock, self._db.conn:
            if event == "opened":
                self._db.conn.execute(f"INSERT OR REPLACE INTO alerts ({_COLUMNS}) VALUES ({', '.join('?' * 14)})",
                                      self._row(alert))
            else:
                self._db.conn.execute(
                    "UPDATE alerts SET category = ?, severity = ?, confidence = ?, summary = ?, first_ns = ?, last_ns = ?, "
                    "detections = ?, detection_count = ?, updated_at = ? WHERE id = ?",
                    (alert.category, alert.severity, alert.confidence, alert.summary, alert.first_ns, alert.last_ns,
                     json.dumps(alert.detections, default=str), alert.detection_count, alert.updated_at, alert.id))
        self._active = self._count_active()

    def get(self, alert_id: str) -> Alert | None:
        with self._db.lock:
            row = self._db.conn.execute(f"SELECT {_COLUMNS} FROM alerts WHERE id = ?", (alert_id,)).fetchone()
        return self._alert(row) if row else None

    def find_open(self, agent_id: str, indicator: str) -> Alert | None:
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
        with self._db.lock:
            rows = self._db.conn.execute(
                f"SELECT {_COLUMNS} FROM alerts {where} ORDER BY last_ns DESC, updated_at DESC LIMIT ?",
                (*params, limit)).fetchall()
        return [self._alert(r) for r in rows]

    def set_status(self, alert_id: str, status: str) -> Alert | None:
        """Apply a triage transition; None when there is no such alert; InvalidTransition when not allowed."""
        with self._db.lock, self._db.conn:
            row = self._db.conn.execute("SELECT status FROM alerts WHERE id = ?", (alert_id,)).fetchone()
            if row is None:
                return None
            if status not in TRANSITIONS[row[0]]:
                raise InvalidTransition(row[0], status)
            self._db.conn.execute("UPDATE alerts SET status = ?, updated_at = ? WHERE id = ?", (status, time.time(), alert_id))
        self._active = self._count_active()
        return self.get(alert_id)

    def delete(self, alert_id: str) -> bool:
        with self._db.lock, self._db.conn:
            deleted = self._db.conn.execute("DELETE FROM alerts WHERE id = ?", (alert_id,)).rowcount
        self._active = self._count_active()
        return bool(deleted)
