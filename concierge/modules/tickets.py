"""/tickets: staff requests and maintenance, with the ticket state machine."""

from __future__ import annotations

import logging
from typing import Literal

from pydantic import Field

from concierge.api import Access, Call, Endpoint, Id, OutSchema, QuerySchema, Schema
from concierge.errors import NotFound
from concierge.records import RecordStore
from concierge.sessions import AuthContext
from concierge.statemachines import TICKET

log = logging.getLogger(__name__)

TicketStatus = Literal["open", "in_progress", "resolved", "closed", "canceled"]
Category = Literal["request", "maintenance", "housekeeping", "complaint"]
Priority = Literal["low", "normal", "high", "urgent"]


class TicketIn(Schema):
    title: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=4000)
    category: Category = "request"
    priority: Priority = "normal"
    room: str | None = Field(default=None, min_length=1, max_length=16)
    guest_id: Id | None = None
    assignee_id: Id | None = None


class TicketPatch(Schema):
    title: str | None = Field(default=None, min_length=1, max_length=200)
    description: str | None = Field(default=None, max_length=4000)
    category: Category | None = None
    priority: Priority | None = None
    room: str | None = Field(default=None, min_length=1, max_length=16)
    guest_id: Id | None = None
    assignee_id: Id | None = None


class TicketOut(OutSchema):
    id: str
    title: str
    description: str
    category: Category
    priority: Priority
    room: str | None
    guest_id: str | None
    assignee_id: str | None
    status: TicketStatus
    created_by: str
    created_at: str
    updated_at: str
    resolved_at: str | None


class TicketList(OutSchema):
    items: list[TicketOut]


class TicketsQuery(QuerySchema):
    status: TicketStatus | None = None
    category: Category | None = None
    assignee_id: Id | None = None


class TicketParams(Schema):
    ticket_id: Id


class TicketStatusIn(Schema):
    ticket_id: Id
    status: TicketStatus


class TicketService:
    def __init__(self, store: RecordStore) -> None:
        self.store = store

    def _check_refs(self, org: str, values: dict) -> None:
        with self.store.db.transaction(write=False) as tx:
            if values.get("guest_id") and tx.one("SELECT 1 AS ok FROM guests WHERE id = ? AND organization_id = ?", (values["guest_id"], org)) is None:
                raise NotFound("Guest not found")
            if values.get("assignee_id") and tx.one("SELECT 1 AS ok FROM memberships WHERE user_id = ? AND organization_id = ?", (values["assignee_id"], org)) is None:
                raise NotFound("Assignee is not a member of this organization")

    def create(self, auth: AuthContext, body: TicketIn) -> dict:
        org = auth.organization_id or ""
        values = body.model_dump()
        self._check_refs(org, values)
        return self.store.insert(org, {**values, "status": TICKET.initial, "created_by": auth.user_id})

    def update(self, org: str, ticket_id: str, values: dict) -> dict:
        self._check_refs(org, values)
        return self.store.update(org, ticket_id, values)

    def move(self, auth: AuthContext, ticket_id: str, target: str) -> dict:
        org = auth.organization_id or ""
        with self.store.db.transaction() as tx:
            row = self.store.get_in(tx, org, ticket_id)
            TICKET.check(row["status"], target)
            changes: dict = {"status": target}
            if target == "resolved":
                changes["resolved_at"] = self.store.clock.iso()
            elif target == "open":
                changes["resolved_at"] = None
            self.store.update_in(tx, org, ticket_id, changes)
            row = self.store.get_in(tx, org, ticket_id)
        log.info("ticket transition id=%s to=%s by=%s", ticket_id, target, auth.user_id)
        return row


def routes(service: TicketService) -> list:
    store = service.store

    def org(c: Call) -> str:
        return c.auth.organization_id

    S, P = Access.STAFF, TicketParams
    return [
        (Endpoint("GET", "", "Tickets (filter by status, category, assignee)", S, query=TicketsQuery, response=TicketList), lambda c: TicketList(items=[TicketOut(**r) for r in store.list(org(c), c.query.model_dump())])),
        (Endpoint("GET", "/<ticket_id>", "One ticket", S, params=P, response=TicketOut), lambda c: TicketOut(**store.get(org(c), c.params.ticket_id))),
        (Endpoint("POST", "", "Open a ticket", S, body=TicketIn, response=TicketOut, status=201), lambda c: TicketOut(**service.create(c.auth, c.body))),
        (Endpoint("PUT", "/<ticket_id>", "Replace a ticket's details", S, params=P, body=TicketIn, response=TicketOut), lambda c: TicketOut(**service.update(org(c), c.params.ticket_id, c.body.model_dump()))),
        (Endpoint("PATCH", "/<ticket_id>", "Change some details (assignee, priority...)", S, params=P, body=TicketPatch, response=TicketOut), lambda c: TicketOut(**service.update(org(c), c.params.ticket_id, c.body.model_dump(exclude_unset=True, exclude_none=True)))),
        (Endpoint("DELETE", "/<ticket_id>", "Delete a ticket", S, params=P, status=204), lambda c: store.delete(org(c), c.params.ticket_id)),
        (Endpoint("POST", "/update-status", "Move a ticket through its state machine", S, body=TicketStatusIn, response=TicketOut), lambda c: TicketOut(**service.move(c.auth, c.body.ticket_id, c.body.status))),
    ]
