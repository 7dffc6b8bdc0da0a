"""/check-in/stream: the caller's server-sent events (ready, then every update on guest:<userId>:status)."""

from __future__ import annotations

from typing import Iterator

import bottle

from concierge.api import Access, Call, Endpoint
from concierge.database import Database
from concierge.errors import NotFound
from concierge.modules.cardex import GuestOut, guest_out
from concierge.streams import StreamHub, parse_last_event_id


def routes(hub: StreamHub, db: Database) -> list:
    def my_stay(call: Call) -> GuestOut:
        with db.transaction(write=False) as tx:
            row = tx.one(
                "SELECT * FROM guests WHERE user_id = ? AND organization_id = ? ORDER BY COALESCE(arrival_date, created_at) DESC, id LIMIT 1",
                (call.auth.user_id, call.auth.organization_id),
            )
        if row is None:
            raise NotFound("No stay is linked to your account")
        return guest_out(row)

    def stream(call: Call) -> Iterator[bytes]:
        user_id = call.auth.user_id
        hub.acquire(user_id)  # 503 + Retry-After beyond the caps
        resp = bottle.response
        resp.content_type = "text/event-stream; charset=utf-8"
        resp.set_header("Cache-Control", "no-cache, no-transform")
        resp.set_header("X-Accel-Buffering", "no")
        last = parse_last_event_id(call.headers.get("Last-Event-ID"))
        return hub.stream(user_id, f"guest:{user_id}:status", last)

    return [
        (Endpoint("GET", "/stay", "The guest's own stay (room, dates, check-in status)", Access.GUEST, response=GuestOut), my_stay),
        (
            Endpoint(
                "GET",
                "/stream",
                "Server-sent events for the caller: `ready`, then `status` events (ids increase; resume with Last-Event-ID; heartbeat every 15 s)",
                Access.AUTH,
                stream=True,
                headers=(("Last-Event-ID", False, "Resume after this event id (recent events are replayed)"),),
            ),
            stream,
        )
    ]
