"""/menu: the room-service menu (read by any member, edited by staff)."""

from __future__ import annotations

from pydantic import Field

from concierge.api import Access, Call, Endpoint, Id, OutSchema, QuerySchema, Schema
from concierge.records import RecordStore


class MenuItemIn(Schema):
    name: str = Field(min_length=1, max_length=120)
    description: str = Field(default="", max_length=1000)
    category: str = Field(min_length=1, max_length=40)
    price_cents: int = Field(ge=0, le=1_000_000)
    currency: str = Field(default="EUR", pattern=r"^[A-Z]{3}$")
    available: bool = True


class MenuItemPatch(Schema):
    name: str | None = Field(default=None, min_length=1, max_length=120)
    description: str | None = Field(default=None, max_length=1000)
    category: str | None = Field(default=None, min_length=1, max_length=40)
    price_cents: int | None = Field(default=None, ge=0, le=1_000_000)
    currency: str | None = Field(default=None, pattern=r"^[A-Z]{3}$")
    available: bool | None = None


class MenuItemOut(OutSchema):
    id: str
    name: str
    description: str
    category: str
    price_cents: int
    currency: str
    available: bool
    created_at: str
    updated_at: str


class MenuList(OutSchema):
    items: list[MenuItemOut]


class MenuQuery(QuerySchema):
    category: str | None = Field(default=None, max_length=40)
    available_only: bool | None = None


class MenuParams(Schema):
    item_id: Id


def routes(store: RecordStore) -> list:
    def org(c: Call) -> str:
        return c.auth.organization_id

    def listing(c: Call) -> MenuList:
        rows = store.list(org(c), {"category": c.query.category, "available": True if c.query.available_only else None}, order="category, name")
        return MenuList(items=[MenuItemOut(**r) for r in rows])

    S, A, P = Access.STAFF, Access.AUTH, MenuParams
    return [
        (Endpoint("GET", "/items", "The menu", A, query=MenuQuery, response=MenuList), listing),
        (Endpoint("GET", "/items/<item_id>", "One menu item", A, params=P, response=MenuItemOut), lambda c: MenuItemOut(**store.get(org(c), c.params.item_id))),
        (Endpoint("POST", "/items", "Add a menu item", S, body=MenuItemIn, response=MenuItemOut, status=201), lambda c: MenuItemOut(**store.insert(org(c), c.body.model_dump()))),
        (Endpoint("PUT", "/items/<item_id>", "Replace a menu item", S, params=P, body=MenuItemIn, response=MenuItemOut), lambda c: MenuItemOut(**store.update(org(c), c.params.item_id, c.body.model_dump()))),
        (Endpoint("PATCH", "/items/<item_id>", "Change a menu item (e.g. sold out)", S, params=P, body=MenuItemPatch, response=MenuItemOut), lambda c: MenuItemOut(**store.update(org(c), c.params.item_id, c.body.model_dump(exclude_unset=True, exclude_none=True)))),
        (Endpoint("DELETE", "/items/<item_id>", "Remove a menu item", S, params=P, status=204), lambda c: store.delete(org(c), c.params.item_id)),
    ]
