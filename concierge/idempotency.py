"""Idempotency-Key handling: same key + same body replays the stored response; other body 422; in flight 409."""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any, Callable

from concierge.clock import Clock
from concierge.database import Database, IntegrityError
from concierge.errors import ConciergeError, Conflict, ValidationFailed

log = logging.getLogger(__name__)

KEY_TTL_SECONDS = 24 * 3600


class StoredError(ConciergeError):
    """A 4xx answer recorded under an idempotency key, replayed as it was."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(body.get("error", "Error"))
        self.status = status
        self._body = body

    def body(self) -> dict[str, Any]:
        return dict(self._body)


def request_hash(body: Any) -> str:
    """A hash of the validated body in canonical JSON, so key order and spacing do not matter."""
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


class IdempotencyStore:
    """idempotency_keys table; one row per (scope, key)."""

    def __init__(self, db: Database, clock: Clock) -> None:
        self.db = db
        self.clock = clock

    def run(self, scope: str, key: str | None, body: Any, operation: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], bool]:
        """Run `operation` once per (scope, key); returns (response body, replayed)."""
        if not key:
            raise ValidationFailed([{"location": "header", "field": "Idempotency-Key", "message": "The Idempotency-Key header is required", "type": "missing"}])
        digest = request_hash(body)
        now = self.clock.now()
        with self.db.transaction() as tx:
            tx.execute("DELETE FROM idempotency_keys WHERE created_at < ?", (now - KEY_TTL_SECONDS,))
            try:
                tx.execute(
                    "INSERT INTO idempotency_keys (scope, idem_key, request_hash, state, created_at) VALUES (?,?,?,?,?)",
                    (scope, key, digest, "in_flight", now),
                )
                fresh = True
            except IntegrityError:
                fresh = False
        if not fresh:
            return self._replay(scope, key, digest), True
        try:
            result = operation()
        except ConciergeError as err:
            if err.status >= 500:
                self._forget(scope, key)
            else:
                self._store(scope, key, "failed", err.status, err.body())
            raise
        except BaseException:
            self._forget(scope, key)  # unknown outcome: let the client retry with the same key
            raise
        self._store(scope, key, "done", 200, result)
        return result, False

    def _replay(self, scope: str, key: str, digest: str) -> dict[str, Any]:
        with self.db.transaction(write=False) as tx:
            row = tx.one("SELECT * FROM idempotency_keys WHERE scope = ? AND idem_key = ?", (scope, key))
        if row is None:
            raise Conflict("A request with this Idempotency-Key was just abandoned; retry")
        if row["request_hash"] != digest:
            raise ValidationFailed(
                [{"location": "header", "field": "Idempotency-Key", "message": "This key was already used with a different request body", "type": "idempotency_key_reused"}]
            )
        if row["state"] == "in_flight":
            raise Conflict("A request with this Idempotency-Key is still being processed")
        body = json.loads(row["response_body"])
        if row["state"] == "failed":
            raise StoredError(int(row["response_status"]), body)
        return body

    def _store(self, scope: str, key: str, state: str, status: int, body: dict[str, Any]) -> None:
        with self.db.transaction() as tx:
            tx.execute(
                "UPDATE idempotency_keys SET state = ?, response_status = ?, response_body = ? WHERE scope = ? AND idem_key = ?",
                (state, status, json.dumps(body), scope, key),
            )

    def _forget(self, scope: str, key: str) -> None:
        with self.db.transaction() as tx:
            tx.execute("DELETE FROM idempotency_keys WHERE scope = ? AND idem_key = ?", (scope, key))
