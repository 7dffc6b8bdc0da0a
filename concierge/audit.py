"""The audit trail of an organization's invitations and memberships: who did what to which record, in order."""

from __future__ import annotations

import json
import logging
from typing import Any

from concierge.clock import Clock, new_id
from concierge.database import Database, Row, Tx

log = logging.getLogger(__name__)

# Every action the trail records (a test checks each one is written by the step it names).
ACTIONS = (
    "invitation.created",
    "invitation.revoked",
    "invitation.accepted",
    "invitation.declined",
    "invitation.expired",
    "membership.created",
    "membership.role_changed",
    "membership.removed",
    "membership.left",
)


class AuditLog:
    """audit_events table; written in the transaction of the change it records, so neither exists without the other."""

    def __init__(self, db: Database, clock: Clock) -> None:
        self.db = db
        self.clock = clock

    def record(self, tx: Tx, org_id: str, actor_id: str | None, action: str, subject_id: str, **detail: Any) -> None:
        if action not in ACTIONS:
            raise ValueError(f"unknown audit action {action!r}")
        row = tx.one("SELECT COALESCE(MAX(seq), 0) + 1 AS next FROM audit_events WHERE organization_id = ?", (org_id,))
        seq = int(row["next"]) if row else 1
        tx.execute(
            "INSERT INTO audit_events (id, organization_id, seq, actor_id, action, subject_id, detail, created_at) VALUES (?,?,?,?,?,?,?,?)",
            (new_id("aud"), org_id, seq, actor_id, action, subject_id, json.dumps(detail, sort_keys=True), self.clock.iso()),
        )
        log.info("audit org=%s actor=%s action=%s subject=%s", org_id, actor_id, action, subject_id)

    def events(self, org_id: str, limit: int, offset: int) -> list[Row]:
        """Newest first."""
        with self.db.transaction(write=False) as tx:
            rows = tx.all("SELECT * FROM audit_events WHERE organization_id = ? ORDER BY seq DESC LIMIT ? OFFSET ?", (org_id, limit, offset))
        for row in rows:
            row["detail"] = json.loads(row["detail"])
        return rows
