"""/rooms: room inventory and housekeeping state (staff)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from concierge.api import Access, Call, Endpoint, Id, OutSchema, QuerySchema, Schema
from concierge.database import IntegrityError
from concierge.errors import Conflict
from concierge.records import RecordStore

Housekeeping = Literal["clean", "dirty", "inspected", "out_of_order"]


class RoomIn(Schema):
    number: str = Field(min_length=1, max_length=16, pattern=r"^[A-Za-z0-9-]+$")
    room_type: str = Field(min_length=1, max_length=40)
    floor: int = Field(default=0, ge=-5, le=200)
    housekeeping: Housekeeping = "clean"


class RoomPatch(Schema):
    number: str | None = Field(default=None, min_length=1, max_length=16, pattern=r"^[A-Za-z0-9-]+$")
    room_type: str | None = Field(default=None, min_length=1, max_length=40)
    floor: int | None = Field(default=None, ge=-5, le=200)
    housekeeping: Housekeeping | None = None


class RoomOut(OutSchema):
    id: str
    number: str
    room_type: str
    floor: int
    housekeeping: Housekeeping
    created_at: str
    updated_at: str


class RoomList(OutSchema):
    items: list[RoomOut]


class RoomsQuery(QuerySchema):
    housekeeping: Housekeeping | None = None


class RoomParams(Schema):
    room_id: Id


def routes(store: RecordStore) -> list:
    def org(c: Call) -> str:
        return c.auth.organization_id

    def save(c: Call, values: dict, room_id: str | None = None) -> RoomOut:
        try:
            row = store.update(org(c), room_id, values) if room_id else store.insert(org(c), values)
        except IntegrityError as err:
            raise Conflict("A room with this number already exists") from err
        return RoomOut(**row)

    S, P = Access.STAFF, RoomParams
    return [
        (Endpoint("GET", "", "Rooms (filter by housekeeping state)", S, query=RoomsQuery, response=RoomList), lambda c: RoomList(items=[RoomOut(**r) for r in store.list(org(c), {"housekeeping": c.query.housekeeping}, order="number")])),
        (Endpoint("GET", "/<room_id>", "One room", S, params=P, response=RoomOut), lambda c: RoomOut(**store.get(org(c), c.params.room_id))),
        (Endpoint("POST", "", "Add a room", S, body=RoomIn, response=RoomOut, status=201), lambda c: save(c, c.body.model_dump())),
        (Endpoint("PUT", "/<room_id>", "Replace a room", S, params=P, body=RoomIn, response=RoomOut), lambda c: save(c, c.body.model_dump(), c.params.room_id)),
        (Endpoint("PATCH", "/<room_id>", "Change a room (e.g. housekeeping state)", S, params=P, body=RoomPatch, response=RoomOut), lambda c: save(c, c.body.model_dump(exclude_unset=True, exclude_none=True), c.params.room_id)),
        (Endpoint("DELETE", "/<room_id>", "Remove a room", S, params=P, status=204), lambda c: store.delete(org(c), c.params.room_id)),
    ]
