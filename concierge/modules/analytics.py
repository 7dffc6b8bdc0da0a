"""/analytics: occupancy, bookings and response times (managers and up see it through the staff level)."""

from __future__ import annotations

import datetime as dt
from datetime import datetime

from pydantic import Field

from concierge.api import Access, Call, Endpoint, OutSchema, QuerySchema
from concierge.clock import Clock
from concierge.database import Database


class AnalyticsQuery(QuerySchema):
    date: dt.date | None = Field(default=None, description="Occupancy on this day (defaults to today, UTC)")


class OccupancyOut(OutSchema):
    date: str
    rooms: int
    occupied: int
    rate: float


class BookingStatsOut(OutSchema):
    by_status: dict[str, int]
    room_service_orders: dict[str, int]
    room_service_revenue_cents: int


class ResponseTimesOut(OutSchema):
    chat_first_reply_median_seconds: float | None
    ticket_resolution_median_seconds: float | None


class AnalyticsOut(OutSchema):
    occupancy: OccupancyOut
    bookings: BookingStatsOut
    response_times: ResponseTimesOut


def _seconds(a: str, b: str) -> float:
    return (datetime.fromisoformat(b.replace("Z", "+00:00")) - datetime.fromisoformat(a.replace("Z", "+00:00"))).total_seconds()


def _median(values: list[float]) -> float | None:
    if not values:
        return None
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


class AnalyticsService:
    def __init__(self, db: Database, clock: Clock) -> None:
        self.db = db
        self.clock = clock

    def summary(self, org: str, day: dt.date | None) -> AnalyticsOut:
        d = day.isoformat() if day else self.clock.today()
        with self.db.transaction(write=False) as tx:
            rooms = tx.one("SELECT COUNT(*) AS n FROM rooms WHERE organization_id = ?", (org,))
            occupied = tx.one(
                "SELECT COUNT(DISTINCT room) AS n FROM guests WHERE organization_id = ? AND room IS NOT NULL AND status = 'arrived' "
                "AND (arrival_date IS NULL OR arrival_date <= ?) AND (departure_date IS NULL OR departure_date >= ?)",
                (org, d, d),
            )
            bookings = tx.all("SELECT status, COUNT(*) AS n FROM bookings WHERE organization_id = ? GROUP BY status", (org,))
            orders = tx.all("SELECT status, COUNT(*) AS n, SUM(total_cents) AS total FROM room_service_orders WHERE organization_id = ? GROUP BY status", (org,))
            firsts = tx.all(
                "SELECT t.created_at AS opened, MIN(m.created_at) AS replied FROM chat_threads t JOIN chat_messages m ON m.thread_id = t.id "
                "WHERE t.organization_id = ? AND m.author IN ('ai', 'staff') GROUP BY t.id, t.created_at",
                (org,),
            )
            resolved = tx.all("SELECT created_at, resolved_at FROM tickets WHERE organization_id = ? AND resolved_at IS NOT NULL", (org,))
        total_rooms = int(rooms["n"]) if rooms else 0
        occ = int(occupied["n"]) if occupied else 0
        return AnalyticsOut(
            occupancy=OccupancyOut(date=d, rooms=total_rooms, occupied=occ, rate=round(occ / total_rooms, 4) if total_rooms else 0.0),
            bookings=BookingStatsOut(
                by_status={r["status"]: int(r["n"]) for r in bookings},
                room_service_orders={r["status"]: int(r["n"]) for r in orders},
                room_service_revenue_cents=sum(int(r["total"] or 0) for r in orders if r["status"] == "delivered"),
            ),
            response_times=ResponseTimesOut(
                chat_first_reply_median_seconds=_median([_seconds(r["opened"], r["replied"]) for r in firsts]),
                ticket_resolution_median_seconds=_median([_seconds(r["created_at"], r["resolved_at"]) for r in resolved]),
            ),
        )


def routes(service: AnalyticsService) -> list:
    return [(Endpoint("GET", "", "Occupancy, bookings by status, room-service revenue, response times", Access.STAFF, query=AnalyticsQuery, response=AnalyticsOut), lambda c: service.summary(c.auth.organization_id, c.query.date))]
