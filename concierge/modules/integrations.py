"""/integrations: the PMS adapter's status, a resumable full sync, and the outbox of pending PMS changes."""

from __future__ import annotations

import logging
from typing import Literal

from pydantic import Field

from concierge.api import Access, Call, Endpoint, OutSchema, Schema
from concierge.clock import Clock, new_id
from concierge.database import Database, Row
from concierge.errors import Forbidden, UpstreamError
from concierge.modules.cardex import touch_guest_list
from concierge.pms import PmsAdapter, PmsReservation
from concierge.sessions import AuthContext

log = logging.getLogger(__name__)

STAFF_ROLES = ("staff", "manager", "admin", "owner")


class FullSyncIn(Schema):
    page_size: int = Field(default=100, ge=1, le=1000)
    resume: bool = Field(default=True, description="Continue the last interrupted run from its cursor instead of starting over")


class SyncRunOut(OutSchema):
    run_id: str
    adapter: str
    status: Literal["completed", "interrupted"]
    resumed: bool
    fetched: int
    created: int
    updated: int
    cursor: str | None
    error: str | None
    started_at: str
    finished_at: str | None


class OutboxItemOut(OutSchema):
    id: str
    kind: str
    status: Literal["pending", "sending", "delivered", "dead"]
    attempts: int
    last_error: str | None
    created_at: str
    delivered_at: str | None


class IntegrationStatusOut(OutSchema):
    adapter: str
    pending: int
    dead: int
    last_sync: SyncRunOut | None
    outbox: list[OutboxItemOut]


def _run_out(row: Row, resumed: bool = False) -> SyncRunOut:
    return SyncRunOut(run_id=row["id"], resumed=resumed, **{k: row[k] for k in ("adapter", "status", "fetched", "created", "updated", "cursor", "error", "started_at", "finished_at")})


class SyncService:
    """Full sync of reservations into the cardex; progress is saved per page so an interrupted run resumes."""

    def __init__(self, db: Database, pms: PmsAdapter, clock: Clock, resolve_role: object) -> None:
        self.db = db
        self.pms = pms
        self.clock = clock
        self.resolve_role = resolve_role

    def _require_staff(self, auth: AuthContext) -> None:
        if self.resolve_role(auth) not in STAFF_ROLES:  # type: ignore[operator]
            raise Forbidden("Only hotel staff can synchronise the PMS")

    def full_sync(self, auth: AuthContext, body: FullSyncIn) -> SyncRunOut:
        self._require_staff(auth)
        org = auth.organization_id or ""
        with self.db.transaction(write=False) as tx:
            last = tx.one("SELECT * FROM sync_runs WHERE organization_id = ? ORDER BY started_at DESC, id DESC LIMIT 1", (org,))
        resumed = bool(body.resume and last and last["status"] == "interrupted")
        if resumed:
            assert last is not None
            run = last
        else:
            run = {"id": new_id("sync"), "cursor": None, "fetched": 0, "created": 0, "updated": 0}
            with self.db.transaction() as tx:
                tx.execute("INSERT INTO sync_runs (id, organization_id, adapter, status, started_at) VALUES (?,?,?,?,?)", (run["id"], org, self.pms.name, "running", self.clock.iso()))
        cursor, counts = run["cursor"], {k: run[k] for k in ("fetched", "created", "updated")}
        error = None
        while True:
            try:
                page = self.pms.reservations(cursor, body.page_size)
            except UpstreamError as err:
                error = str(err)
                log.warning("full sync interrupted run=%s cursor=%s error=%s", run["id"], cursor, err)
                break
            with self.db.transaction() as tx:
                for item in page.items:
                    counts["created" if self._upsert(tx, org, item) else "updated"] += 1
                counts["fetched"] += len(page.items)
                tx.execute(
                    "UPDATE sync_runs SET cursor = ?, fetched = ?, created = ?, updated = ?, status = 'running' WHERE id = ?",
                    (page.next_cursor, counts["fetched"], counts["created"], counts["updated"], run["id"]),
                )
            cursor = page.next_cursor
            if cursor is None:
                break
        status = "interrupted" if error else "completed"
        with self.db.transaction() as tx:
            tx.execute("UPDATE sync_runs SET status = ?, error = ?, finished_at = ? WHERE id = ?", (status, error, self.clock.iso(), run["id"]))
            row = tx.one("SELECT * FROM sync_runs WHERE id = ?", (run["id"],))
        assert row is not None
        log.info("full sync %s run=%s fetched=%d created=%d updated=%d", status, run["id"], counts["fetched"], counts["created"], counts["updated"])
        return _run_out(row, resumed)

    def _upsert(self, tx: object, org: str, r: PmsReservation) -> bool:
        now = self.clock.iso()
        existing = tx.one("SELECT id FROM guests WHERE organization_id = ? AND pms_reservation_id = ?", (org, r.reservation_id))  # type: ignore[attr-defined]
        values = (r.first_name or "-", r.last_name or "-", r.email, r.phone, r.room, r.arrival, r.departure)
        if existing:
            tx.execute(  # type: ignore[attr-defined]
                "UPDATE guests SET first_name = ?, last_name = ?, email = ?, phone = ?, room = ?, arrival_date = ?, departure_date = ?, updated_at = ? WHERE id = ?",
                (*values, now, existing["id"]),
            )
            touch_guest_list(tx, org, existing["id"])  # type: ignore[arg-type]
            return False
        gid = new_id("gst")
        tx.execute(  # type: ignore[attr-defined]
            "INSERT INTO guests (id, organization_id, first_name, last_name, email, phone, room, arrival_date, departure_date, status, pms_reservation_id, created_at, updated_at) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (gid, org, *values, r.status if r.status in ("expected", "arrived", "checked_out", "canceled", "no_show") else "expected", r.reservation_id, now, now),
        )
        touch_guest_list(tx, org, gid)  # type: ignore[arg-type]
        return True

    def status(self, auth: AuthContext) -> IntegrationStatusOut:
        self._require_staff(auth)
        org = auth.organization_id or ""
        with self.db.transaction(write=False) as tx:
            last = tx.one("SELECT * FROM sync_runs WHERE organization_id = ? ORDER BY started_at DESC, id DESC LIMIT 1", (org,))
            items = tx.all("SELECT * FROM outbox WHERE organization_id = ? ORDER BY created_at DESC, id LIMIT 50", (org,))
            counts = {r["status"]: r["n"] for r in tx.all("SELECT status, COUNT(*) AS n FROM outbox WHERE organization_id = ? GROUP BY status", (org,))}
        return IntegrationStatusOut(
            adapter=self.pms.name,
            pending=int(counts.get("pending", 0)) + int(counts.get("sending", 0)),
            dead=int(counts.get("dead", 0)),
            last_sync=_run_out(last) if last and last["status"] != "running" else None,
            outbox=[OutboxItemOut(**{k: i[k] for k in OutboxItemOut.model_fields}) for i in items],
        )


def routes(service: SyncService) -> list:
    A = Access.AUTH
    return [
        (Endpoint("GET", "/status", "PMS adapter, last sync and the outbox of changes waiting for the PMS", A, response=IntegrationStatusOut), lambda c: service.status(c.auth)),
        (Endpoint("POST", "/full-sync", "Import every reservation from the PMS (resumable; reports counts)", A, body=FullSyncIn, response=SyncRunOut), lambda c: service.full_sync(c.auth, c.body)),
    ]
