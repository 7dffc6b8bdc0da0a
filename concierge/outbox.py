"""Transactional outbox: side effects towards external systems are written in the same transaction as the
local state change, then delivered with retries and backoff, so a PMS outage never loses a change."""

from __future__ import annotations

import json
import logging
import threading
from typing import Any, Callable

from concierge.clock import Clock, new_id
from concierge.database import Database, Tx
from concierge.errors import UpstreamError
from concierge.pms import PermanentPmsError

log = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any]], None]


def enqueue(tx: Tx, clock: Clock, org_id: str, kind: str, payload: dict[str, Any]) -> str:
    """Record a side effect inside the caller's transaction."""
    oid = new_id("obx")
    tx.execute(
        "INSERT INTO outbox (id, organization_id, kind, payload, status, attempts, next_attempt_at, created_at) VALUES (?,?,?,?,?,?,?,?)",
        (oid, org_id, kind, json.dumps(payload), "pending", 0, clock.now(), clock.iso()),
    )
    return oid


class OutboxDispatcher:
    """Delivers due outbox rows through a registry of handlers; a background thread retries."""

    MAX_ATTEMPTS = 8
    LEASE_SECONDS = 300.0  # a claimed row is retried by anyone after this long without an answer

    def __init__(self, db: Database, clock: Clock, handlers: dict[str, Handler], interval: float, base_delay: float = 2.0) -> None:
        self.db = db
        self.clock = clock
        self.handlers = handlers
        self.interval = interval
        self.base_delay = base_delay
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._run_lock = threading.Lock()

    def kick(self) -> None:
        """Deliver soon (after a commit that enqueued something)."""
        self._wake.set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="outbox", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.run_once()
            except Exception:  # keep the worker alive; the rows stay pending and are retried
                log.exception("outbox pass failed")

    def run_once(self) -> int:
        """Deliver every due row once; returns how many were delivered."""
        with self._run_lock:
            now = self.clock.now()
            with self.db.transaction(write=False) as tx:
                # 'sending' rows whose lease ran out belong to an instance that died mid-delivery
                due = tx.all(
                    "SELECT * FROM outbox WHERE status IN ('pending', 'sending') AND next_attempt_at <= ? ORDER BY created_at, id LIMIT 100",
                    (now,),
                )
            delivered = 0
            for row in due:
                with self.db.transaction() as tx:  # claim with a lease: another instance may race for the same row
                    claimed = tx.execute(
                        "UPDATE outbox SET status = 'sending', next_attempt_at = ? WHERE id = ? AND status = ? AND next_attempt_at = ?",
                        (now + self.LEASE_SECONDS, row["id"], row["status"], row["next_attempt_at"]),
                    )
                if claimed != 1:
                    continue
                delivered += self._deliver(row)
            return delivered

    def _deliver(self, row: dict[str, Any]) -> int:
        attempts = row["attempts"] + 1
        handler = self.handlers.get(row["kind"])
        try:
            if handler is None:
                raise PermanentPmsError(f"no handler for outbox kind {row['kind']!r}")
            handler(json.loads(row["payload"]))
        except PermanentPmsError as err:
            self._finish(row["id"], "dead", attempts, str(err))
            log.error("outbox delivery refused for good id=%s kind=%s error=%s", row["id"], row["kind"], err)
            return 0
        except (UpstreamError, OSError) as err:
            status = "dead" if attempts >= self.MAX_ATTEMPTS else "pending"
            delay = min(self.base_delay * 2 ** (attempts - 1), 600)
            self._finish(row["id"], status, attempts, str(err), self.clock.now() + delay)
            log.warning("outbox delivery failed id=%s kind=%s attempt=%d retry_in=%.0fs error=%s", row["id"], row["kind"], attempts, delay, err)
            return 0
        self._finish(row["id"], "delivered", attempts, None)
        return 1

    def _finish(self, oid: str, status: str, attempts: int, error: str | None, next_at: float | None = None) -> None:
        with self.db.transaction() as tx:
            tx.execute(
                "UPDATE outbox SET status = ?, attempts = ?, last_error = ?, next_attempt_at = COALESCE(?, next_attempt_at), delivered_at = ? WHERE id = ?",
                (status, attempts, error, next_at, self.clock.iso() if status == "delivered" else None, oid),
            )
