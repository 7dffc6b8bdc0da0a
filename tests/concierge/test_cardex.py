"""The guest register: search, filters, CRUD, check-in emails."""

from __future__ import annotations

from tests.concierge.conftest import Hotel


def _seed(hotel: Hotel) -> dict[str, dict]:
    staff = hotel.client("staff")
    out = {}
    for first, last, email, phone, room, vip in (
        ("Ana", "Moreau", "ana@mail.test", "+33 6 11 22 33 44", "301", True),
        ("Bruno", "Keller", "bk@corp.test", "+41 79 555 00 11", "302", False),
        ("Chen", "Wei", None, None, "415", False),
    ):
        out[first] = staff.post("/cardex/guests", {"firstName": first, "lastName": last, "email": email, "phone": phone, "room": room, "vip": vip}).json()
    staff.post("/cardex/confirm-arrival", {"guestId": out["Bruno"]["id"]})
    return out


def test_search_by_name_email_phone_and_room(hotel: Hotel) -> None:
    _seed(hotel)
    staff = hotel.client("staff")

    def names(**params: str) -> set[str]:
        return {g["firstName"] for g in staff.get("/cardex/guests", params=params).json()["items"]}

    assert names(search="moreau") == {"Ana"}
    assert names(search="corp.test") == {"Bruno"}
    assert names(search="555 00") == {"Bruno"}
    assert names(search="415") == {"Chen"}
    assert names(vipOnly="true") == {"Ana"}
    assert names(staying="true") == {"Bruno"}
    assert names(staying="false") == {"Ana", "Chen"}
    assert names(search="an", vipOnly="true") == {"Ana"}


def test_put_patch_delete(hotel: Hotel) -> None:
    guests = _seed(hotel)
    staff = hotel.client("staff")
    gid = guests["Chen"]["id"]
    put = staff.put(f"/cardex/guests/{gid}", {"firstName": "Chen", "lastName": "Wei", "room": "416"})
    assert put.status_code == 200 and put.json()["room"] == "416" and put.json()["vip"] is False
    patch = staff.patch(f"/cardex/guests/{gid}", {"vip": True})
    assert patch.json()["vip"] is True and patch.json()["room"] == "416"
    bad = staff.patch(f"/cardex/guests/{gid}", {"arrivalDate": "2030-05-10", "departureDate": "2030-05-01"})
    assert bad.status_code == 422
    assert staff.delete(f"/cardex/guests/{gid}").status_code == 204
    assert staff.get(f"/cardex/guests/{gid}").status_code == 404


def test_send_check_in_email(hotel: Hotel) -> None:
    guests = _seed(hotel)
    resp = hotel.client("staff").post("/cardex/send-check-in-email", {"guestId": guests["Ana"]["id"]})
    assert resp.status_code == 200
    body = resp.json()
    assert body["sentTo"] == "ana@mail.test" and guests["Ana"]["id"] in body["checkInUrl"]
    sent = hotel.concierge.mailer.messages()
    assert sent[-1]["To"] == "ana@mail.test" and body["checkInUrl"] in sent[-1].get_content()
    assert hotel.client("staff").get(f"/cardex/guests/{guests['Ana']['id']}").json()["checkInEmailSentAt"] == body["sentAt"]
    arrived = hotel.client("staff").post("/cardex/send-check-in-email", {"guestId": guests["Bruno"]["id"]})
    assert arrived.status_code == 400


def test_today_board(hotel: Hotel) -> None:
    staff = hotel.client("staff")
    today = hotel.concierge.clock.today()
    staff.post("/cardex/guests", {"firstName": "Arr", "lastName": "Today", "arrivalDate": today})
    staff.post("/tickets", {"title": "Broken lamp"})
    board = staff.get("/today").json()
    assert board["date"] == today
    assert [g["firstName"] for g in board["arrivals"]] == ["Arr"]
    assert [t["title"] for t in board["openTickets"]] == ["Broken lamp"]


def test_analytics(hotel: Hotel) -> None:
    staff = hotel.client("staff")
    staff.post("/rooms", {"number": "101", "roomType": "double"})
    staff.post("/rooms", {"number": "102", "roomType": "double"})
    g = staff.post("/cardex/guests", {"firstName": "Occ", "lastName": "Upant", "room": "101"}).json()
    staff.post("/cardex/confirm-arrival", {"guestId": g["id"]})
    stats = staff.get("/analytics").json()
    assert stats["occupancy"]["rooms"] == 2 and stats["occupancy"]["occupied"] == 1 and stats["occupancy"]["rate"] == 0.5
