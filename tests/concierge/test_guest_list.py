"""GET /cardex/guests: the page the database encodes, its cached total kept true by every kind of write,
search as a plain substring, and the pre-encoded body held to the GuestList model."""

from __future__ import annotations

import json

import pytest

from concierge.api import Encoded, ResponseContractError, _dump
from concierge.modules.cardex import GuestList
from concierge.pms import PmsReservation, SimulatedPms
from tests.concierge.conftest import Hotel, make_hotel


def _list(hotel: Hotel, **params: object) -> dict:
    resp = hotel.client("staff").get("/cardex/guests", params=params)
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_the_page_has_every_field_of_the_model_in_order_and_typed(hotel: Hotel) -> None:
    staff = hotel.client("staff")
    created = staff.post(
        "/cardex/guests",
        {"firstName": "Zoë \"Q\" \\ O'Neil", "lastName": "Ünïcode ☃", "email": "z@mail.test", "vip": True, "arrivalDate": "2030-01-02", "notes": "line\nbreak\ttab </script>"},
    ).json()
    page = _list(hotel)
    assert page["total"] == 1
    assert page["items"] == [created]  # same JSON as the detail route (pydantic's own serialisation)
    assert page["items"][0]["vip"] is True and page["items"][0]["userId"] is None
    assert GuestList.model_validate(page, strict=True).items[0].first_name == "Zoë \"Q\" \\ O'Neil"


def test_pages_follow_the_documented_order_and_share_one_total(hotel: Hotel) -> None:
    staff = hotel.client("staff")
    for last, first in (("Moreau", "Zoe"), ("Abel", "Bea"), ("Moreau", "Ana"), ("Keller", "Kim"), ("Abel", "Ada")):
        assert staff.post("/cardex/guests", {"firstName": first, "lastName": last}).status_code == 201
    pages = [_list(hotel, limit=2, offset=offset) for offset in (0, 2, 4, 6)]
    assert {p["total"] for p in pages} == {5}
    names = [(g["lastName"], g["firstName"]) for p in pages for g in p["items"]]
    assert names == [("Abel", "Ada"), ("Abel", "Bea"), ("Keller", "Kim"), ("Moreau", "Ana"), ("Moreau", "Zoe")]
    assert pages[-1]["items"] == []


def test_the_total_follows_creates_edits_actions_and_deletes(hotel: Hotel) -> None:
    staff = hotel.client("staff")
    ids = [staff.post("/cardex/guests", {"firstName": f"G{i}", "lastName": "Total", "room": str(200 + i)}).json()["id"] for i in range(3)]
    assert _list(hotel)["total"] == 3 and _list(hotel, staying="true")["total"] == 0
    staff.post("/cardex/guests", {"firstName": "G3", "lastName": "Total"})
    assert _list(hotel)["total"] == 4  # the cached total of the unfiltered list was replaced
    staff.post("/cardex/confirm-arrival", {"guestId": ids[0]})
    assert _list(hotel, staying="true")["total"] == 1 and _list(hotel, staying="false")["total"] == 3
    assert _list(hotel, search="renamed")["total"] == 0
    staff.patch(f"/cardex/guests/{ids[1]}", {"lastName": "Renamed"})
    assert _list(hotel, search="renamed")["total"] == 1
    staff.put(f"/cardex/guests/{ids[2]}", {"firstName": "G2", "lastName": "Total", "vip": True})
    assert _list(hotel, vipOnly="true")["total"] == 1
    staff.delete(f"/cardex/guests/{ids[2]}")
    assert _list(hotel)["total"] == 3 and _list(hotel, vipOnly="true")["total"] == 0
    assert _list(hotel, staying="true")["total"] == 1  # counted again, and cached
    staff.post("/cardex/check-out", {"guestId": ids[0]})
    assert _list(hotel, staying="true")["total"] == 0


def test_every_write_path_refreshes_the_stored_list_entry(make_concierge) -> None:
    """The list serves stored JSON per guest: after each kind of write it equals the detail route's answer."""
    pms = SimulatedPms()
    concierge, base = make_concierge(pms=pms)
    hotel = make_hotel(concierge, base)
    staff = hotel.client("staff")

    def same_as_detail(guest_id: str) -> dict:
        detail = staff.get(f"/cardex/guests/{guest_id}").json()
        assert next(g for g in _list(hotel)["items"] if g["id"] == guest_id) == detail
        return detail

    gid = staff.post("/cardex/guests", {"firstName": "Wri", "lastName": "Ter", "email": "w@mail.test"}).json()["id"]
    same_as_detail(gid)
    staff.patch(f"/cardex/guests/{gid}", {"room": "707", "notes": "quiet"})
    assert same_as_detail(gid)["room"] == "707"
    staff.put(f"/cardex/guests/{gid}", {"firstName": "Wri", "lastName": "Ter", "vip": True})
    assert same_as_detail(gid)["vip"] is True and same_as_detail(gid)["email"] is None
    staff.post("/cardex/send-check-in-email", {"guestId": staff.post("/cardex/guests", {"firstName": "Mail", "lastName": "Me", "email": "m@mail.test"}).json()["id"]})
    assert all(g == staff.get(f"/cardex/guests/{g['id']}").json() for g in _list(hotel)["items"])
    staff.post("/cardex/confirm-arrival", {"guestId": gid})
    from tests.polling import wait_for

    assert wait_for(lambda: staff.get(f"/cardex/guests/{gid}").json()["pmsReservationId"] is not None)  # set by the outbox worker
    assert same_as_detail(gid)["status"] == "arrived"
    staff.post("/cardex/check-out", {"guestId": gid})
    assert same_as_detail(gid)["status"] == "checked_out"
    pms.add(PmsReservation("R9", "Imp", "Orted", None, None, "12", None, None, "expected"))
    staff.post("/integrations/full-sync", {})
    imported = next(g for g in _list(hotel)["items"] if g["pmsReservationId"] == "R9")
    same_as_detail(imported["id"])
    pms.add(PmsReservation("R9", "Imp", "Renamed", None, None, "13", None, None, "expected"))
    staff.post("/integrations/full-sync", {"resume": False})
    assert same_as_detail(imported["id"])["lastName"] == "Renamed"


def test_rows_written_without_a_stored_entry_are_encoded_on_read(hotel: Hotel) -> None:
    from concierge.clock import new_id

    now = hotel.concierge.clock.iso()
    with hotel.concierge.db.transaction() as tx:  # as a bulk import straight into the table would
        tx.execute(
            "INSERT INTO guests (id, organization_id, first_name, last_name, vip, status, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?)",
            (new_id("gst"), hotel.org_id, "Bulk", "Row", 1, "expected", now, now),
        )
    item = _list(hotel)["items"][0]
    assert item["firstName"] == "Bulk" and item["vip"] is True
    assert item == hotel.client("staff").get(f"/cardex/guests/{item['id']}").json()


def test_the_total_follows_a_pms_import(make_concierge) -> None:
    pms = SimulatedPms()
    concierge, base = make_concierge(pms=pms)
    hotel = make_hotel(concierge, base)
    assert _list(hotel)["total"] == 0
    for i in range(3):
        pms.add(PmsReservation(f"R{i}", f"Imp{i}", "Orted", None, None, None, None, None, "expected"))
    assert hotel.client("staff").post("/integrations/full-sync", {}).json()["created"] == 3
    assert _list(hotel)["total"] == 3
    pms.add(PmsReservation("R0", "Imp0", "Changed", None, None, None, None, None, "expected"))
    hotel.client("staff").post("/integrations/full-sync", {"resume": False})
    assert _list(hotel, search="changed")["total"] == 1


def test_a_write_by_another_instance_is_seen(make_concierge, tmp_path) -> None:
    """The totals' version lives in the database: an instance sharing it recounts after the other's write."""
    first, base_a = make_concierge(state=tmp_path / "shared")
    second, base_b = make_concierge(state=tmp_path / "shared")
    hotel = make_hotel(first, base_a)
    from tests.concierge.conftest import Client

    on_b = Client(base_b).sign_in(hotel.emails["staff"])
    assert on_b.get("/cardex/guests").json()["total"] == 0
    hotel.client("staff").post("/cardex/guests", {"firstName": "Via", "lastName": "A"})
    assert on_b.get("/cardex/guests").json()["total"] == 1


@pytest.mark.parametrize("pattern", ["%", "_", "%%%%", "\\", "a%b", "'; DROP TABLE guests; --"])
def test_search_is_a_plain_substring_not_a_pattern(hotel: Hotel, pattern: str) -> None:
    staff = hotel.client("staff")
    staff.post("/cardex/guests", {"firstName": "Plain", "lastName": "Name", "room": "12"})
    staff.post("/cardex/guests", {"firstName": "Odd", "lastName": f"x{pattern}y"})
    page = _list(hotel, search=pattern)
    assert [g["firstName"] for g in page["items"]] == ["Odd"] and page["total"] == 1
    assert _list(hotel)["total"] == 2  # and the table is intact


def test_oversized_and_malformed_queries_are_422_and_the_list_keeps_serving(hotel: Hotel) -> None:
    staff = hotel.client("staff")
    for params in ({"search": "x" * 101}, {"limit": 0}, {"limit": 501}, {"offset": -1}, {"vipOnly": "maybe"}, {"limit": "1e9"}):
        resp = staff.get("/cardex/guests", params=params)
        assert resp.status_code == 422, params
        assert resp.json()["error"] == "Validation failed"
    assert _list(hotel)["items"] == []


def test_a_pre_encoded_body_that_breaks_the_model_is_refused() -> None:
    good = {"items": [], "total": 0}
    assert _dump(GuestList, Encoded(json.dumps(good).encode()), check=True) == json.dumps(good).encode()
    item = {
        "id": "gst_1", "firstName": "A", "lastName": "B", "email": None, "phone": None, "room": None, "vip": 1, "status": "expected",
        "arrivalDate": None, "departureDate": None, "notes": "", "userId": None, "pmsReservationId": None, "checkInEmailSentAt": None,
        "arrivedAt": None, "createdAt": "x", "updatedAt": "x",
    }
    with pytest.raises(ResponseContractError):  # vip as 0/1 instead of a boolean
        _dump(GuestList, Encoded(json.dumps({"items": [item], "total": 1}).encode()), check=True)
    with pytest.raises(ResponseContractError):  # a field the model does not have
        _dump(GuestList, Encoded(json.dumps({"items": [{**item, "vip": True, "organizationId": "org_x"}], "total": 1}).encode()), check=True)
    with pytest.raises(ResponseContractError):
        _dump(GuestList, Encoded(b'{"items": []}'), check=True)
