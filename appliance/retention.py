"""Retention: alerts and finished flows older than `storage.retentionDays` go; the store stays under
`storage.maxStorageGb` by deleting the least recently changed alerts, closed ones first."""

from __future__ import annotations

import logging
import threading
import time

from appliance.console_settings import ConsoleSettingsStore
from appliance.detection.alerts import AlertStore
from appliance.detection.database import DetectionDatabase
from appliance.flows.finished import FinishedFlows

log = logging.getLogger(__name__)

DAY_S = 86400
CAP_BATCH = 50  # alerts deleted per step while over the cap (each step re-measures)


class RetentionService:
    """Runs `enforce()` every `interval` seconds on its own thread (and on demand)."""

    def __init__(self, settings: ConsoleSettingsStore, alerts: AlertStore, flows: FinishedFlows,
                 db: DetectionDatabase, interval: float = 600.0) -> None:
        self._settings = settings
        self._alerts = alerts
        self._flows = flows
        self._db = db
        self.interval = interval
        self.alerts_deleted = 0
        self.flows_deleted = 0
        self.runs = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def used_bytes(self) -> int:
        """Bytes of the detection database in use (free pages left by deletions not counted)."""
        with self._db.lock:
            pages = self._db.conn.execute("PRAGMA page_count").fetchone()[0]
            free = self._db.conn.execute("PRAGMA freelist_count").fetchone()[0]
            size = self._db.conn.execute("PRAGMA page_size").fetchone()[0]
        return int((pages - free) * size)

    def enforce(self, now: float | None = None) -> dict[str, int]:
        now = time.time() if now is None else now
        storage = self._settings.current.storage
        cutoff = now - storage.retentionDays * DAY_S
        alerts = self._alerts.delete_older_than(cutoff)
        flows = self._flows.drop_older_than(int(cutoff * 1e9))
        cap = int(storage.maxStorageGb * 1024 ** 3)
        while self.used_bytes() > cap:
            removed = self._alerts.delete_oldest(CAP_BATCH)
            alerts += removed
            if not removed:
                break
        self.alerts_deleted += alerts
        self.flows_deleted += flows
        self.runs += 1
        if alerts or flows:
            log.info("retention deleted alerts=%d finished_flows=%d retention_days=%d", alerts, flows, storage.retentionDays)
        return {"alerts": alerts, "flows": flows}

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.enforce()
            except Exception:  # a failed pass must not end retention for good
                log.exception("retention pass failed")

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="retention", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
