"""The published state machines are enforced over HTTP and match the README."""

from __future__ import annotations

from pathlib import Path

import pytest

from concierge.statemachines import BOOKING, CHECK_IN, MACHINES, PAYMENT, ROOM_SERVICE, TICKET, markdown_table
from tests.concierge.conftest import Hotel

README = Path(__file__).resolve().parents[2] / "docs" / "concierge.md"


@pytest.mark.parametrize("name", sorted(MACHINES))
def test_readme_publishes_each_machine(name: str) -> None:
    assert markdown_table(MACHINES[name]) in README.read_text()


def _menu_item(hotel: Hotel) -> str:
    return hotel.client("staff").post("/menu/items", {"name": "Soup", "category": "starters", "priceCents": 900}).json()["id"]


def test_room_service_order_lifecycle(hotel: Hotel) -> None:
    guest, guest_client = hotel.guest_with_account("Ola")
    item = _menu_item(hotel)
    order = guest_client.post("/booking/room-service", {"items": [{"menuItemId": item, "quantity": 2}]})
    assert order.status_code == 201
    order = order.json()
    assert order["status"] == ROOM_SERVICE.initial and order["totalCents"] == 1800 and order["room"] == "101"
    staff = hotel.client("staff")
    for status in ("accepted", "preparing", "on_the_way", "delivered"):
        resp = staff.post("/booking/room-service/update-status", {"orderId": order["id"], "status": status})
        assert resp.status_code == 200 and resp.json()["status"] == status
    bad = staff.post("/booking/room-service/update-status", {"orderId": order["id"], "status": "preparing"})
    assert bad.status_code == 400
    assert bad.json()["code"] == "INVALID_TRANSITION" and bad.json()["from"] == "delivered" and bad.json()["to"] == "preparing"


def test_guest_may_only_cancel_their_own_order(hotel: Hotel) -> None:
    _, guest_client = hotel.guest_with_account("Pia")
    _, other_client = hotel.guest_with_account("Quinn")
    item = _menu_item(hotel)
    order = guest_client.post("/booking/room-service", {"items": [{"menuItemId": item, "quantity": 1}]}).json()
    assert guest_client.post("/booking/room-service/update-status", {"orderId": order["id"], "status": "accepted"}).status_code == 403
    assert other_client.post("/booking/room-service/update-status", {"orderId": order["id"], "status": "canceled"}).status_code == 404
    assert other_client.get(f"/booking/room-service/{order['id']}").status_code == 404
    resp = guest_client.post("/booking/room-service/update-status", {"orderId": order["id"], "status": "canceled"})
    assert resp.status_code == 200 and resp.json()["status"] == "canceled"


def test_booking_lifecycle(hotel: Hotel) -> None:
    _, guest_client = hotel.guest_with_account("Rae")
    booking = guest_client.post("/booking/bookings", {"service": "spa", "startsAt": "2030-01-02T10:00:00Z", "partySize": 2}).json()
    assert booking["status"] == BOOKING.initial
    staff = hotel.client("staff")
    assert staff.post("/booking/bookings/update-status", {"bookingId": booking["id"], "status": "completed"}).json()["code"] == "INVALID_TRANSITION"
    assert staff.post("/booking/bookings/update-status", {"bookingId": booking["id"], "status": "confirmed"}).json()["status"] == "confirmed"
    assert staff.post("/booking/bookings/update-status", {"bookingId": booking["id"], "status": "completed"}).json()["status"] == "completed"
    assert guest_client.get("/booking/bookings").json()["items"][0]["status"] == "completed"


def test_ticket_lifecycle(hotel: Hotel) -> None:
    staff = hotel.client("staff")
    ticket = staff.post("/tickets", {"title": "Leaking tap", "category": "maintenance", "room": "204"}).json()
    assert ticket["status"] == TICKET.initial
    for status in ("in_progress", "resolved", "open", "resolved", "closed"):
        resp = staff.post("/tickets/update-status", {"ticketId": ticket["id"], "status": status})
        assert resp.status_code == 200 and resp.json()["status"] == status
    assert resp.json()["resolvedAt"]
    reopen = staff.post("/tickets/update-status", {"ticketId": ticket["id"], "status": "open"})
    assert reopen.status_code == 400 and reopen.json()["from"] == "closed"


def test_check_in_machine_over_http(hotel: Hotel) -> None:
    staff = hotel.client("staff")
    guest = staff.post("/cardex/guests", {"firstName": "Sam", "lastName": "Late"}).json()
    assert guest["status"] == CHECK_IN.initial
    assert staff.post("/cardex/check-out", {"guestId": guest["id"]}).json()["code"] == "INVALID_TRANSITION"
    assert staff.post("/cardex/mark-no-show", {"guestId": guest["id"]}).json()["status"] == "no_show"
    assert staff.post("/cardex/confirm-arrival", {"guestId": guest["id"]}).json()["status"] == "arrived"
    assert staff.post("/cardex/check-out", {"guestId": guest["id"]}).json()["status"] == "checked_out"
    assert staff.post("/cardex/confirm-arrival", {"guestId": guest["id"]}).status_code == 400


def test_status_is_not_writable_through_put_or_patch(hotel: Hotel) -> None:
    staff = hotel.client("staff")
    guest = staff.post("/cardex/guests", {"firstName": "Tia", "lastName": "Put"}).json()
    resp = staff.patch(f"/cardex/guests/{guest['id']}", {"status": "arrived"})
    assert resp.status_code == 422


def test_payment_machine_is_stripes() -> None:
    assert set(PAYMENT.states) == {"requires_payment_method", "requires_confirmation", "requires_action", "processing", "requires_capture", "succeeded", "canceled"}
