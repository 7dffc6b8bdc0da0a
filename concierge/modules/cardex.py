"""/cardex: the guest register (staff only), arrival confirmation, check-in emails, departures."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from datetime import date
from typing import Any, Callable, Literal

from pydantic import Field, model_validator

from concierge.api import Access, Call, Email, Encoded, Endpoint, Id, OutSchema, QuerySchema, Schema
from concierge.clock import Clock, new_id
from concierge.database import Database, Row, Tx
from concierge.errors import BadRequest, NotFound, ValidationFailed
from concierge.mail import Mailer
from concierge.outbox import enqueue
from concierge.pubsub import PubSub
from concierge.statemachines import CHECK_IN

log = logging.getLogger(__name__)

GuestStatus = Literal["expected", "arrived", "no_show", "checked_out", "canceled"]


class GuestFields(Schema):
    first_name: str = Field(min_length=1, max_length=80)
    last_name: str = Field(min_length=1, max_length=80)
    email: Email | None = None
    phone: str | None = Field(default=None, min_length=3, max_length=32, pattern=r"^\+?[0-9 ()-]+$")
    room: str | None = Field(default=None, min_length=1, max_length=16)
    vip: bool = False
    arrival_date: date | None = None
    departure_date: date | None = None
    notes: str = Field(default="", max_length=2000)
    user_id: Id | None = Field(default=None, description="The guest's app account (a member of this organization)")

    @model_validator(mode="after")
    def _dates_in_order(self) -> GuestFields:
        if self.arrival_date and self.departure_date and self.departure_date < self.arrival_date:
            raise ValueError("departureDate must not be before arrivalDate")
        return self


class GuestIn(GuestFields):
    pass


class GuestPatch(Schema):
    first_name: str | None = Field(default=None, min_length=1, max_length=80)
    last_name: str | None = Field(default=None, min_length=1, max_length=80)
    email: Email | None = None
    phone: str | None = Field(default=None, min_length=3, max_length=32, pattern=r"^\+?[0-9 ()-]+$")
    room: str | None = Field(default=None, min_length=1, max_length=16)
    vip: bool | None = None
    arrival_date: date | None = None
    departure_date: date | None = None
    notes: str | None = Field(default=None, max_length=2000)
    user_id: Id | None = None


class GuestOut(OutSchema):
    id: str
    first_name: str
    last_name: str
    email: str | None
    phone: str | None
    room: str | None
    vip: bool
    status: GuestStatus
    arrival_date: str | None
    departure_date: str | None
    notes: str
    user_id: str | None
    pms_reservation_id: str | None
    check_in_email_sent_at: str | None
    arrived_at: str | None
    created_at: str
    updated_at: str


class GuestList(OutSchema):
    items: list[GuestOut]
    total: int


class GuestsQuery(QuerySchema):
    search: str | None = Field(default=None, max_length=100, description="Matches name, email, phone or room")
    vip_only: bool | None = None
    staying: bool | None = Field(default=None, description="true: in house (arrived); false: not in house")
    limit: int = Field(default=100, ge=1, le=500)
    offset: int = Field(default=0, ge=0)


class GuestParams(Schema):
    guest_id: Id


class GuestAction(Schema):
    guest_id: Id


class CheckInEmailOut(OutSchema):
    guest_id: str
    sent_to: str
    sent_at: str
    check_in_url: str


NULLABLE = frozenset({"email", "phone", "room", "arrival_date", "departure_date", "user_id"})  # PATCH null clears these; elsewhere null means unchanged
FIELDS = ("first_name", "last_name", "email", "phone", "room", "vip", "arrival_date", "departure_date", "notes", "user_id")


def _db_value(key: str, value: Any) -> Any:
    if key == "vip":
        return 1 if value else 0
    if isinstance(value, date):
        return value.isoformat()
    return value


# The list serves each row as stored JSON (`guests.list_json`): GuestOut's fields in order, camelCase keys,
# types fixed by the SQL schema (vip: INTEGER 0/1 -> JSON boolean). Every write to a guest refreshes it in
# the writer's transaction (`touch_guest_list`); a row written elsewhere (bulk imports) has NULL and is
# encoded on the fly. SQLite hands over the whole page as one value: its Python module releases and
# re-takes the GIL for every row stepped, which under 4 concurrent requests cost more than the rows.
LIST_COLUMNS = tuple(GuestOut.model_fields)
LIST_KEYS = tuple(GuestOut.model_fields[c].alias or c for c in LIST_COLUMNS)


def _json_pairs(boolean: Callable[[str], str]) -> str:
    return ", ".join(f"'{key}', {boolean(col) if col == 'vip' else col}" for key, col in zip(LIST_KEYS, LIST_COLUMNS))


ROW_JSON = {  # one guest row as its GuestOut JSON, per back end
    "sqlite": "json_object(" + _json_pairs(lambda c: f"json(CASE WHEN {c} <> 0 THEN 'true' ELSE 'false' END)") + ")",
    "postgresql": "json_build_object(" + _json_pairs(lambda c: f"({c} <> 0)") + ")::text",
}
PAGE_SQL = {  # per back end; {where} is the filter clause, then LIMIT ? OFFSET ?; first column: the guests_version
    "sqlite": (
        "SELECT (SELECT guests_version FROM organizations WHERE id = ?) AS version, (SELECT group_concat(j, ',') FROM (SELECT COALESCE(list_json, "
        + ROW_JSON["sqlite"]
        + ") AS j FROM guests WHERE {where} ORDER BY last_name, first_name, id LIMIT ? OFFSET ?)) AS page"
    ),
    "postgresql": (
        "SELECT (SELECT guests_version FROM organizations WHERE id = ?) AS version, COALESCE(list_json, "
        + ROW_JSON["postgresql"]
        + ") AS j FROM guests WHERE {where} ORDER BY last_name, first_name, id LIMIT ? OFFSET ?"
    ),
}


def touch_guest_list(tx: Tx, org_id: str, guest_id: str | None = None) -> None:
    """Record a change to the organization's guests (in the writer's transaction): cached totals are stale,
    and the changed guest's stored list JSON is encoded again.

    Every write to `guests` calls this; the version lives in the database, so instances sharing PostgreSQL
    see each other's writes.
    """
    tx.execute("UPDATE organizations SET guests_version = guests_version + 1 WHERE id = ?", (org_id,))
    if guest_id is not None:
        tx.execute(f"UPDATE guests SET list_json = {ROW_JSON[tx.kind]} WHERE id = ?", (guest_id,))


class GuestTotals:
    """Guest-list totals per (organization, filters), valid while the organization's guests_version is unchanged.

    Counting 10,000 rows on every page was the largest single cost of `GET /cardex/guests`; a page only
    needs to count again after a write. Bounded (least recently used entries go first).
    """

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._entries: OrderedDict[tuple[Any, ...], tuple[int, int]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: tuple[Any, ...], version: int) -> int | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry[0] != version:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return entry[1]

    def put(self, key: tuple[Any, ...], version: int, total: int) -> None:
        with self._lock:
            self._entries[key] = (version, total)
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)


class GuestStore:
    """guests table."""

    def __init__(self, db: Database, totals: GuestTotals | None = None) -> None:
        self.db = db
        self.totals = totals or GuestTotals()

    def page_json(self, org_id: str, q: GuestsQuery) -> bytes:
        """One page of the guest list, encoded as the GuestList JSON (the hot path of the staff console)."""
        clause, args = self._where(org_id, q)
        key = (org_id, q.search, q.vip_only, q.staying)
        with self.db.statements() as tx:
            # the version comes in the page's own statement (one snapshot); a total counted afterwards is
            # filed under that version, so a write in between can only make the entry stale, never wrong
            rows = tx.tuples(PAGE_SQL[self.db.kind].format(where=clause), [org_id, *args, q.limit, q.offset])
            version = None if not rows or rows[0][0] is None else int(rows[0][0])  # None: an empty page on PostgreSQL
            total = None if version is None else self.totals.get(key, version)
            if total is None:
                counted = tx.one(f"SELECT COUNT(*) AS n FROM guests WHERE {clause}", args)
                total = int(counted["n"]) if counted else 0
                if version is not None:
                    self.totals.put(key, version, total)
        items = ",".join(r[1] for r in rows if r[1] is not None)
        return b'{"items":[' + items.encode() + b'],"total":' + str(total).encode() + b"}"

    @staticmethod
    def _where(org_id: str, q: GuestsQuery) -> tuple[str, list[Any]]:
        where = ["organization_id = ?"]
        args: list[Any] = [org_id]
        if q.search:
            # the search is a plain substring: LIKE wildcards typed by the caller are escaped (no pattern language)
            literal = q.search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            like = f"%{literal.lower()}%"
            where.append(
                "(LOWER(first_name || ' ' || last_name) LIKE ? ESCAPE '\\' OR LOWER(COALESCE(email, '')) LIKE ? ESCAPE '\\' "
                "OR COALESCE(phone, '') LIKE ? ESCAPE '\\' OR LOWER(COALESCE(room, '')) LIKE ? ESCAPE '\\')"
            )
            args += [like, like, f"%{literal}%", like]
        if q.vip_only:
            where.append("vip = 1")
        if q.staying is True:
            where.append("status = 'arrived'")
        elif q.staying is False:
            where.append("status <> 'arrived'")
        return " AND ".join(where), args

    @staticmethod
    def get(tx: Tx, org_id: str, guest_id: str) -> Row:
        row = tx.one("SELECT * FROM guests WHERE id = ? AND organization_id = ?", (guest_id, org_id))
        if row is None:
            raise NotFound("Guest not found")
        return row

    def insert(self, tx: Tx, org_id: str, values: dict[str, Any], status: str, now: str, pms_id: str | None = None) -> str:
        gid = new_id("gst")
        cols = ["id", "organization_id", "status", "pms_reservation_id", "created_at", "updated_at", *values]
        tx.execute(
            f"INSERT INTO guests ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
            [gid, org_id, status, pms_id, now, now, *(_db_value(k, v) for k, v in values.items())],
        )
        touch_guest_list(tx, org_id, gid)
        return gid

    def update(self, tx: Tx, org_id: str, guest_id: str, values: dict[str, Any], now: str) -> None:
        sets = ", ".join(f"{k} = ?" for k in values)
        tx.execute(
            f"UPDATE guests SET {sets}, updated_at = ? WHERE id = ? AND organization_id = ?",
            [*(_db_value(k, v) for k, v in values.items()), now, guest_id, org_id],
        )
        touch_guest_list(tx, org_id, guest_id)


def patch_values(body: GuestPatch) -> dict[str, Any]:
    """The fields a PATCH sets: null clears nullable fields and leaves the others unchanged."""
    return {k: v for k, v in body.model_dump(exclude_unset=True).items() if v is not None or k in NULLABLE}


def guest_out(row: Row) -> GuestOut:
    return GuestOut(**{**row, "vip": bool(row["vip"])})


class CardexService:
    """Guest register operations; arrival and departure go through the check-in state machine."""

    def __init__(self, store: GuestStore, pubsub: PubSub, mailer: Mailer, clock: Clock, kick_outbox: Callable[[], None], public_url: str) -> None:
        self.store = store
        self.pubsub = pubsub
        self.mailer = mailer
        self.clock = clock
        self.kick_outbox = kick_outbox
        self.public_url = public_url

    def _check_user(self, tx: Tx, org_id: str, user_id: str | None) -> None:
        if user_id and tx.one("SELECT 1 AS ok FROM memberships WHERE user_id = ? AND organization_id = ?", (user_id, org_id)) is None:
            raise NotFound("userId is not a member of this organization")

    def create(self, org_id: str, body: GuestIn) -> Row:
        with self.store.db.transaction() as tx:
            self._check_user(tx, org_id, body.user_id)
            gid = self.store.insert(tx, org_id, body.model_dump(include=set(FIELDS)), CHECK_IN.initial, self.clock.iso())
            return self.store.get(tx, org_id, gid)

    def get(self, org_id: str, guest_id: str) -> Row:
        with self.store.db.transaction(write=False) as tx:
            return self.store.get(tx, org_id, guest_id)

    def update(self, org_id: str, guest_id: str, values: dict[str, Any]) -> Row:
        with self.store.db.transaction() as tx:
            current = self.store.get(tx, org_id, guest_id)
            self._check_user(tx, org_id, values.get("user_id"))
            merged = {**{k: current[k] for k in ("arrival_date", "departure_date")}, **{k: (v.isoformat() if isinstance(v, date) else v) for k, v in values.items()}}
            if merged["arrival_date"] and merged["departure_date"] and merged["departure_date"] < merged["arrival_date"]:
                raise ValidationFailed([{"location": "body", "field": "departureDate", "message": "departureDate must not be before arrivalDate", "type": "value_error"}])
            if values:
                self.store.update(tx, org_id, guest_id, values, self.clock.iso())
            return self.store.get(tx, org_id, guest_id)

    def delete(self, org_id: str, guest_id: str) -> None:
        with self.store.db.transaction() as tx:
            self.store.get(tx, org_id, guest_id)
            tx.execute("DELETE FROM guests WHERE id = ? AND organization_id = ?", (guest_id, org_id))
            touch_guest_list(tx, org_id)

    def _transition(self, org_id: str, guest_id: str, target: str, pms_kind: str | None, extra: dict[str, Any]) -> Row:
        now = self.clock.iso()
        with self.store.db.transaction() as tx:
            guest = self.store.get(tx, org_id, guest_id)
            CHECK_IN.check(guest["status"], target)
            tx.execute("UPDATE guests SET status = ?, updated_at = ? WHERE id = ?", (target, now, guest_id))
            touch_guest_list(tx, org_id, guest_id)
            if extra:
                self.store.update(tx, org_id, guest_id, extra, now)
            if pms_kind:
                enqueue(tx, self.clock, org_id, pms_kind, {"guestId": guest_id, "organizationId": org_id, "reservationId": guest["pms_reservation_id"]})
            row = self.store.get(tx, org_id, guest_id)
        if pms_kind:
            self.kick_outbox()
        if row["user_id"]:
            self.pubsub.publish(
                f"guest:{row['user_id']}:status",
                {"status": target, "guestId": guest_id, "room": row["room"], "firstName": row["first_name"], "at": now},
            )
        log.info("check-in transition guest=%s from=%s to=%s", guest_id, guest["status"], target)
        return row

    def confirm_arrival(self, org_id: str, guest_id: str) -> Row:
        return self._transition(org_id, guest_id, "arrived", "pms.check_in", {"arrived_at": self.clock.iso()})

    def check_out(self, org_id: str, guest_id: str) -> Row:
        return self._transition(org_id, guest_id, "checked_out", "pms.check_out", {})

    def mark_no_show(self, org_id: str, guest_id: str) -> Row:
        return self._transition(org_id, guest_id, "no_show", None, {})

    def send_check_in_email(self, org_id: str, guest_id: str) -> CheckInEmailOut:
        guest = self.get(org_id, guest_id)
        if not guest["email"]:
            raise BadRequest("This guest has no email address")
        if guest["status"] != "expected":
            raise BadRequest(f"Online check-in is only offered before arrival (guest is {guest['status']})")
        url = f"{self.public_url}/check-in?guest={guest_id}"
        body = (
            f"Dear {guest['first_name']} {guest['last_name']},\n\nYour room is being prepared. Check in online before you arrive "
            f"and skip the front desk:\n{url}\n\nSee you soon."
        )
        self.mailer.send(guest["email"], "Check in online before you arrive", body)
        now = self.clock.iso()
        with self.store.db.transaction() as tx:
            self.store.update(tx, org_id, guest_id, {"check_in_email_sent_at": now}, now)
        return CheckInEmailOut(guest_id=guest_id, sent_to=guest["email"], sent_at=now, check_in_url=url)


def routes(service: CardexService) -> list:
    """(Endpoint, handler) pairs mounted under /cardex; every route requires staff."""

    def org(call: Call) -> str:
        return call.auth.organization_id

    def list_guests(call: Call) -> Encoded:
        return Encoded(service.store.page_json(org(call), call.query))  # typed by the SQL schema; tests check it against GuestList

    S = Access.STAFF
    P = GuestParams
    return [
        (Endpoint("GET", "/guests", "Guests of the caller's organization (search name/email/phone/room, vipOnly, staying)", S, query=GuestsQuery, response=GuestList), list_guests),
        (Endpoint("GET", "/guests/<guest_id>", "One guest", S, params=P, response=GuestOut), lambda c: guest_out(service.get(org(c), c.params.guest_id))),
        (Endpoint("POST", "/guests", "Register a guest (status starts at expected)", S, body=GuestIn, response=GuestOut, status=201), lambda c: guest_out(service.create(org(c), c.body))),
        (Endpoint("PUT", "/guests/<guest_id>", "Replace a guest's details (status changes only through actions)", S, params=P, body=GuestIn, response=GuestOut), lambda c: guest_out(service.update(org(c), c.params.guest_id, c.body.model_dump(include=set(FIELDS))))),
        (Endpoint("PATCH", "/guests/<guest_id>", "Change some of a guest's details", S, params=P, body=GuestPatch, response=GuestOut), lambda c: guest_out(service.update(org(c), c.params.guest_id, patch_values(c.body)))),
        (Endpoint("DELETE", "/guests/<guest_id>", "Delete a guest", S, params=P, status=204), lambda c: service.delete(org(c), c.params.guest_id)),
        (Endpoint("POST", "/confirm-arrival", "Mark the guest arrived, check them in at the PMS (outbox), publish on guest:<userId>:status", S, body=GuestAction, response=GuestOut), lambda c: guest_out(service.confirm_arrival(org(c), c.body.guest_id))),
        (Endpoint("POST", "/check-out", "Mark the guest departed and check them out at the PMS (outbox)", S, body=GuestAction, response=GuestOut), lambda c: guest_out(service.check_out(org(c), c.body.guest_id))),
        (Endpoint("POST", "/mark-no-show", "Mark an expected guest as no-show", S, body=GuestAction, response=GuestOut), lambda c: guest_out(service.mark_no_show(org(c), c.body.guest_id))),
        (Endpoint("POST", "/send-check-in-email", "Email an expected guest their online check-in link", S, body=GuestAction, response=CheckInEmailOut), lambda c: service.send_check_in_email(org(c), c.body.guest_id)),
    ]
