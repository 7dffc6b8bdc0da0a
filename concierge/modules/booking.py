"""/booking: service bookings (spa, restaurant, transfers...) and room-service orders, each with a state machine.

Guests see and create their own (the stay linked to their account); staff see and manage all.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from concierge.api import Access, Call, Endpoint, Id, OutSchema, QuerySchema, Schema
from concierge.database import Database, Row
from concierge.errors import BadRequest, Forbidden, NotFound
from concierge.records import RecordStore
from concierge.sessions import AuthContext
from concierge.statemachines import BOOKING, ROOM_SERVICE, StateMachine

log = logging.getLogger(__name__)

BookingStatus = Literal["requested", "confirmed", "declined", "canceled", "completed", "no_show"]
OrderStatus = Literal["placed", "accepted", "preparing", "on_the_way", "delivered", "canceled"]
STAFF_ROLES = ("staff", "manager", "admin", "owner")


class BookingIn(Schema):
    service: str = Field(min_length=1, max_length=80, description="spa, restaurant, transfer, tour...")
    starts_at: datetime
    party_size: int = Field(default=1, ge=1, le=50)
    notes: str = Field(default="", max_length=1000)
    guest_id: Id | None = Field(default=None, description="Staff: the guest; guests: omitted (their own stay)")


class BookingPut(Schema):
    service: str = Field(min_length=1, max_length=80)
    starts_at: datetime
    party_size: int = Field(ge=1, le=50)
    notes: str = Field(default="", max_length=1000)


class BookingPatch(Schema):
    service: str | None = Field(default=None, min_length=1, max_length=80)
    starts_at: datetime | None = None
    party_size: int | None = Field(default=None, ge=1, le=50)
    notes: str | None = Field(default=None, max_length=1000)


class BookingOut(OutSchema):
    id: str
    guest_id: str
    service: str
    starts_at: str
    party_size: int
    notes: str
    status: BookingStatus
    created_by: str
    created_at: str
    updated_at: str


class BookingList(OutSchema):
    items: list[BookingOut]


class BookingStatusIn(Schema):
    booking_id: Id
    status: BookingStatus


class BookingsQuery(QuerySchema):
    status: BookingStatus | None = None
    guest_id: Id | None = None


class BookingParams(Schema):
    booking_id: Id


class OrderLineIn(Schema):
    menu_item_id: Id
    quantity: int = Field(ge=1, le=20)


class OrderIn(Schema):
    items: list[OrderLineIn] = Field(min_length=1, max_length=30)
    notes: str = Field(default="", max_length=500)
    guest_id: Id | None = Field(default=None, description="Staff ordering for a guest; guests omit it")


class OrderLineOut(OutSchema):
    menu_item_id: str
    name: str
    quantity: int
    unit_price_cents: int


class OrderOut(OutSchema):
    id: str
    guest_id: str
    room: str | None
    items: list[OrderLineOut]
    total_cents: int
    currency: str
    notes: str
    status: OrderStatus
    created_at: str
    updated_at: str


class OrderList(OutSchema):
    items: list[OrderOut]


class OrderStatusIn(Schema):
    order_id: Id
    status: OrderStatus


class OrdersQuery(QuerySchema):
    status: OrderStatus | None = None


class OrderParams(Schema):
    order_id: Id


def _order_out(row: Row) -> OrderOut:
    return OrderOut(**{**row, "items": json.loads(row["items"])})


class BookingService:
    """Bookings and orders; whose records a caller may see or move is decided here."""

    def __init__(self, db: Database, bookings: RecordStore, orders: RecordStore, menu: RecordStore, resolve_role: Any) -> None:
        self.db = db
        self.bookings = bookings
        self.orders = orders
        self.menu = menu
        self.resolve_role = resolve_role

    def is_staff(self, auth: AuthContext) -> bool:
        return self.resolve_role(auth) in STAFF_ROLES

    def own_guest_ids(self, auth: AuthContext) -> list[str]:
        with self.db.transaction(write=False) as tx:
            rows = tx.all("SELECT id FROM guests WHERE user_id = ? AND organization_id = ? ORDER BY created_at DESC, id", (auth.user_id, auth.organization_id))
        return [r["id"] for r in rows]

    def guest_for(self, auth: AuthContext, requested: str | None) -> Row:
        """The guest a new booking/order is for: any guest for staff, the caller's own stay for guests."""
        with self.db.transaction(write=False) as tx:
            if self.is_staff(auth):
                if not requested:
                    raise BadRequest("guestId is required when staff create it")
                row = tx.one("SELECT * FROM guests WHERE id = ? AND organization_id = ?", (requested, auth.organization_id))
            else:
                own = self.own_guest_ids(auth)
                if requested and requested not in own:
                    raise Forbidden("Guests can only act for their own stay")
                if not own:
                    raise BadRequest("No stay is linked to your account")
                row = tx.one("SELECT * FROM guests WHERE id = ?", (requested or own[0],))
        if row is None:
            raise NotFound("Guest not found")
        return row

    def visible(self, auth: AuthContext, row: Row) -> Row:
        if not self.is_staff(auth) and row["guest_id"] not in self.own_guest_ids(auth):
            raise NotFound("Not found")
        return row

    def list(self, store: RecordStore, auth: AuthContext, filters: dict[str, Any]) -> list[Row]:
        if self.is_staff(auth):
            return store.list(auth.organization_id or "", filters)
        own = self.own_guest_ids(auth)
        if not own:
            return []
        marks = ",".join("?" * len(own))
        return store.list(auth.organization_id or "", filters, extra=f"guest_id IN ({marks})", args=own)

    def create_booking(self, auth: AuthContext, body: BookingIn) -> Row:
        guest = self.guest_for(auth, body.guest_id)
        values = body.model_dump(exclude={"guest_id"})
        return self.bookings.insert(auth.organization_id or "", {**values, "guest_id": guest["id"], "status": BOOKING.initial, "created_by": auth.user_id})

    def create_order(self, auth: AuthContext, body: OrderIn) -> Row:
        guest = self.guest_for(auth, body.guest_id)
        lines, total, currency = [], 0, None
        for line in body.items:
            item = self.menu.get(auth.organization_id or "", line.menu_item_id)
            if not item["available"]:
                raise BadRequest(f"{item['name']} is not available right now")
            if currency and item["currency"] != currency:
                raise BadRequest("All items of an order must share one currency")
            currency = item["currency"]
            lines.append({"menuItemId": item["id"], "name": item["name"], "quantity": line.quantity, "unitPriceCents": item["price_cents"]})
            total += item["price_cents"] * line.quantity
        values = {"guest_id": guest["id"], "room": guest["room"], "items": json.dumps(lines), "total_cents": total, "currency": currency or "EUR", "notes": body.notes, "status": ROOM_SERVICE.initial, "created_by": auth.user_id}
        return self.orders.insert(auth.organization_id or "", values)

    def move(self, store: RecordStore, machine: StateMachine, auth: AuthContext, record_id: str, target: str) -> Row:
        """A status change: staff follow the machine; guests may only cancel their own."""
        org = auth.organization_id or ""
        with self.db.transaction() as tx:
            row = self.visible(auth, store.get_in(tx, org, record_id))
            if not self.is_staff(auth) and target != "canceled":
                raise Forbidden("Guests can only cancel their own requests")
            machine.check(row["status"], target)
            store.update_in(tx, org, record_id, {"status": target})
            row = store.get_in(tx, org, record_id)
        log.info("%s transition id=%s to=%s by=%s", machine.name, record_id, target, auth.user_id)
        return row


def routes(service: BookingService) -> list:
    b, o = service.bookings, service.orders

    def org(c: Call) -> str:
        return c.auth.organization_id

    A, S = Access.AUTH, Access.STAFF
    BP, OP = BookingParams, OrderParams
    return [
        (Endpoint("GET", "/bookings", "Service bookings (guests: their own)", A, query=BookingsQuery, response=BookingList), lambda c: BookingList(items=[BookingOut(**r) for r in service.list(b, c.auth, {"status": c.query.status, "guest_id": c.query.guest_id})])),
        (Endpoint("GET", "/bookings/<booking_id>", "One booking", A, params=BP, response=BookingOut), lambda c: BookingOut(**service.visible(c.auth, b.get(org(c), c.params.booking_id)))),
        (Endpoint("POST", "/bookings", "Request a booking (status requested)", A, body=BookingIn, response=BookingOut, status=201), lambda c: BookingOut(**service.create_booking(c.auth, c.body))),
        (Endpoint("PUT", "/bookings/<booking_id>", "Replace a booking's details", S, params=BP, body=BookingPut, response=BookingOut), lambda c: BookingOut(**b.update(org(c), c.params.booking_id, c.body.model_dump()))),
        (Endpoint("PATCH", "/bookings/<booking_id>", "Change some of a booking's details", S, params=BP, body=BookingPatch, response=BookingOut), lambda c: BookingOut(**b.update(org(c), c.params.booking_id, c.body.model_dump(exclude_unset=True, exclude_none=True)))),
        (Endpoint("DELETE", "/bookings/<booking_id>", "Delete a booking", S, params=BP, status=204), lambda c: b.delete(org(c), c.params.booking_id)),
        (Endpoint("POST", "/bookings/update-status", "Move a booking through its state machine (guests: cancel only)", A, body=BookingStatusIn, response=BookingOut), lambda c: BookingOut(**service.move(b, BOOKING, c.auth, c.body.booking_id, c.body.status))),
        (Endpoint("GET", "/room-service", "Room-service orders (guests: their own)", A, query=OrdersQuery, response=OrderList), lambda c: OrderList(items=[_order_out(r) for r in service.list(o, c.auth, {"status": c.query.status})])),
        (Endpoint("GET", "/room-service/<order_id>", "One order", A, params=OP, response=OrderOut), lambda c: _order_out(service.visible(c.auth, o.get(org(c), c.params.order_id)))),
        (Endpoint("POST", "/room-service", "Place an order from the menu (total computed here)", A, body=OrderIn, response=OrderOut, status=201), lambda c: _order_out(service.create_order(c.auth, c.body))),
        (Endpoint("POST", "/room-service/update-status", "Move an order through its state machine (guests: cancel their own while placed or accepted)", A, body=OrderStatusIn, response=OrderOut), lambda c: _order_out(service.move(o, ROOM_SERVICE, c.auth, c.body.order_id, c.body.status))),
    ]
