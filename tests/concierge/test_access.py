"""Every route at every access level, over HTTP: 401 without a session, 403 for the wrong role or no CSRF token."""

from __future__ import annotations

import re

import pytest

from concierge.api import ROLE_LEVELS, Access, Endpoint
from concierge.app import build
from concierge.settings import Settings
from tests.concierge.conftest import ROLES, Hotel


def _endpoints() -> list[Endpoint]:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        concierge = build(Settings(state_dir=Path(tmp), kdf_n=2**10))
        try:
            return list(concierge.api.endpoints)
        finally:
            concierge.stop()


ENDPOINTS = _endpoints()


def _path(ep: Endpoint) -> str:
    return re.sub(r"<(\w+)>", "does-not-exist", ep.path)


def _id(ep: Endpoint) -> str:
    return f"{ep.method} {ep.path}"


@pytest.mark.parametrize("ep", [e for e in ENDPOINTS if e.access is not Access.PUBLIC], ids=_id)
def test_anonymous_caller_gets_401(shared_hotel: Hotel, ep: Endpoint) -> None:
    resp = shared_hotel.anonymous().request(ep.method, _path(ep), json={})
    assert resp.status_code == 401
    assert resp.json() == {"error": "Authentication required"}


@pytest.mark.parametrize("ep", [e for e in ENDPOINTS if e.access in ROLE_LEVELS], ids=_id)
def test_roles_outside_the_level_get_403_and_roles_inside_pass(shared_hotel: Hotel, ep: Endpoint) -> None:
    allowed = ROLE_LEVELS[ep.access]
    for role in ROLES:
        resp = shared_hotel.client(role).request(ep.method, _path(ep), json={})
        if role in allowed:
            assert resp.status_code not in (401, 403), (role, resp.text)
        else:
            assert resp.status_code == 403, (role, resp.text)
            assert set(resp.json()) == {"error"}


@pytest.mark.parametrize("ep", [e for e in ENDPOINTS if e.access is not Access.PUBLIC and e.method != "GET" and e.csrf], ids=_id)
def test_cookie_state_change_without_csrf_token_is_refused(shared_hotel: Hotel, ep: Endpoint) -> None:
    resp = shared_hotel.client("owner").request(ep.method, _path(ep), json={}, csrf=False)
    assert resp.status_code == 403
    assert "CSRF" in resp.json()["error"]


def test_a_guest_only_route_exists_and_serves_the_guest(hotel: Hotel) -> None:
    assert any(e.access is Access.GUEST for e in ENDPOINTS)
    guest, client = hotel.guest_with_account("Gwen")
    resp = client.get("/check-in/stay")
    assert resp.status_code == 200 and resp.json()["id"] == guest["id"]
    assert hotel.client("owner").get("/check-in/stay").json() == {"error": "This action is for guests only"}


def test_cardex_is_staff_only_for_every_route() -> None:
    cardex = [e for e in ENDPOINTS if e.path.startswith("/cardex")]
    assert cardex and all(e.access is Access.STAFF for e in cardex)


def test_guest_list_is_scoped_to_the_callers_organization(hotel: Hotel, make_concierge) -> None:
    from tests.concierge.conftest import Client, PASSWORD

    staff = hotel.client("staff")
    staff.post("/cardex/guests", {"firstName": "Mine", "lastName": "Only"})
    other = Client(hotel.base)
    other.post("/users/sign-up", {"email": "rival@other.test", "password": PASSWORD, "name": "Rival", "organizationName": "Rival Inn"})
    other.sign_in("rival@other.test")
    other.post("/cardex/guests", {"firstName": "Theirs", "lastName": "Only"})
    names = {g["firstName"] for g in staff.get("/cardex/guests").json()["items"]}
    assert "Mine" in names and "Theirs" not in names
    mine = staff.get("/cardex/guests", params={"search": "Mine"}).json()["items"][0]
    assert other.get(f"/cardex/guests/{mine['id']}").status_code == 404
