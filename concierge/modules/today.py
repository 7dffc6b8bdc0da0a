"""/today: the day's arrivals, departures, bookings and open tickets for the front desk."""

from __future__ import annotations

import datetime as dt

from pydantic import Field

from concierge.api import Access, Call, Endpoint, OutSchema, QuerySchema
from concierge.clock import Clock
from concierge.database import Database
from concierge.modules.booking import BookingOut
from concierge.modules.cardex import GuestOut, guest_out
from concierge.modules.tickets import TicketOut


class TodayQuery(QuerySchema):
    date: dt.date | None = Field(default=None, description="Defaults to today (UTC)")


class TodayOut(OutSchema):
    date: str
    arrivals: list[GuestOut]
    departures: list[GuestOut]
    bookings: list[BookingOut]
    open_tickets: list[TicketOut]


class TodayService:
    def __init__(self, db: Database, clock: Clock) -> None:
        self.db = db
        self.clock = clock

    def day(self, org: str, day: dt.date | None) -> TodayOut:
        d = day.isoformat() if day else self.clock.today()
        with self.db.transaction(write=False) as tx:
            arrivals = tx.all("SELECT * FROM guests WHERE organization_id = ? AND arrival_date = ? AND status IN ('expected', 'arrived') ORDER BY last_name, id", (org, d))
            departures = tx.all("SELECT * FROM guests WHERE organization_id = ? AND departure_date = ? AND status IN ('arrived', 'checked_out') ORDER BY last_name, id", (org, d))
            bookings = tx.all("SELECT * FROM bookings WHERE organization_id = ? AND SUBSTR(starts_at, 1, 10) = ? AND status IN ('requested', 'confirmed') ORDER BY starts_at, id", (org, d))
            tickets = tx.all("SELECT * FROM tickets WHERE organization_id = ? AND status IN ('open', 'in_progress') ORDER BY created_at, id", (org,))
        return TodayOut(
            date=d,
            arrivals=[guest_out(r) for r in arrivals],
            departures=[guest_out(r) for r in departures],
            bookings=[BookingOut(**r) for r in bookings],
            open_tickets=[TicketOut(**r) for r in tickets],
        )


def routes(service: TodayService) -> list:
    return [(Endpoint("GET", "", "Arrivals, departures, bookings of the day and open tickets", Access.STAFF, query=TodayQuery, response=TodayOut), lambda c: service.day(c.auth.organization_id, c.query.date))]
