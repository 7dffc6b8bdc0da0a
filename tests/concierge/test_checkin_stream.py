"""confirm-arrival -> PMS (outbox) -> guest:<userId>:status -> GET /check-in/stream, end to end over HTTP."""

from __future__ import annotations

import time

from tests.concierge.conftest import Hotel, SseClient
from tests.polling import wait_for


def test_confirm_arrival_reaches_the_guests_stream(hotel: Hotel) -> None:
    guest, guest_client = hotel.guest_with_account("Ada")
    stream = SseClient(hotel.base, guest_client.cookie)
    try:
        assert stream.status == 200
        assert stream.response.getheader("Content-Type").startswith("text/event-stream")
        assert stream.response.getheader("X-Accel-Buffering") == "no"
        ready = stream.next_event()
        assert ready["event"] == "ready" and ready["data"] == {"connected": True}
        resp = hotel.client("staff").post("/cardex/confirm-arrival", {"guestId": guest["id"]})
        assert resp.status_code == 200, resp.text
        assert resp.json()["status"] == "arrived"
        event = stream.next_event()
        assert event["event"] == "status"
        assert event["data"]["status"] == "arrived"
        assert event["data"]["guestId"] == guest["id"]
        assert event["id"] == 1
    finally:
        stream.close()


def test_arrival_checks_the_guest_in_at_the_pms(hotel: Hotel) -> None:
    guest, _ = hotel.guest_with_account("Bob")
    hotel.client("staff").post("/cardex/confirm-arrival", {"guestId": guest["id"]})
    pms = hotel.concierge.pms
    # The outbox job calls the PMS, then stores the reservation id it answered: wait for the stored id.
    detail = wait_for(lambda: (d := hotel.client("staff").get(f"/cardex/guests/{guest['id']}").json())
                      .get("pmsReservationId") and d)
    assert pms.calls and pms.calls[0][0] == "check_in"
    assert detail and detail["pmsReservationId"] == pms.calls[0][1]


def test_confirming_twice_is_an_invalid_transition(hotel: Hotel) -> None:
    guest, _ = hotel.guest_with_account("Cy")
    staff = hotel.client("staff")
    assert staff.post("/cardex/confirm-arrival", {"guestId": guest["id"]}).status_code == 200
    again = staff.post("/cardex/confirm-arrival", {"guestId": guest["id"]})
    assert again.status_code == 400
    body = again.json()
    assert body["code"] == "INVALID_TRANSITION"
    assert body["from"] == "arrived" and body["to"] == "arrived"
    assert "arrived" in body["error"]


def test_stream_resumes_after_last_event_id(hotel: Hotel) -> None:
    guest, guest_client = hotel.guest_with_account("Dee")
    staff = hotel.client("staff")
    staff.post("/cardex/confirm-arrival", {"guestId": guest["id"]})
    staff.post("/cardex/check-out", {"guestId": guest["id"]})
    stream = SseClient(hotel.base, guest_client.cookie, last_event_id="1")
    try:
        assert stream.next_event()["event"] == "ready"
        replayed = stream.next_event()
        assert replayed["id"] == 2 and replayed["data"]["status"] == "checked_out"
    finally:
        stream.close()


def test_stream_sends_heartbeat_comments(hotel: Hotel) -> None:
    _, guest_client = hotel.guest_with_account("Eve")
    stream = SseClient(hotel.base, guest_client.cookie)
    try:
        assert stream.next_event()["event"] == "ready"
        started = time.monotonic()
        assert stream.response.readline() == b": heartbeat\n"  # heartbeat period is 0.5 s in tests
        assert time.monotonic() - started < 3
    finally:
        stream.close()


def test_stream_requires_authentication(hotel: Hotel) -> None:
    resp = hotel.anonymous().get("/check-in/stream")
    assert resp.status_code == 401
    assert resp.json() == {"error": "Authentication required"}
