"""Sign-in, cookies, server-side sessions with idle/absolute expiry, rotation, sign-out, roles on demand."""

from __future__ import annotations

from concierge.sessions import PasswordHasher
from tests.concierge.conftest import PASSWORD, Client, Hotel


def _cookie_header(resp) -> str:
    """The Set-Cookie header of the session cookie."""
    return next(v for k, v in resp.raw.headers.items() if k.lower() == "set-cookie" and v.startswith("concierge_session="))


def test_sign_in_sets_an_httponly_samesite_lax_cookie(hotel: Hotel) -> None:
    resp = hotel.anonymous().post("/users/sign-in", {"email": hotel.emails["staff"], "password": PASSWORD})
    header = _cookie_header(resp).lower()
    assert "httponly" in header and "samesite=lax" in header and "secure" not in header
    body = resp.json()
    assert body["auth"] == {"userId": body["user"]["id"], "organizationId": hotel.org_id, "role": "staff"}
    assert resp.cookies["concierge_csrf"] == body["csrfToken"]  # for same-origin JS (Swagger UI); not HttpOnly


def test_cookie_is_secure_behind_a_proxy_that_says_https(make_concierge) -> None:
    concierge, base = make_concierge(trust_proxy=True)
    from tests.concierge.conftest import make_hotel

    hotel = make_hotel(concierge, base)
    resp = hotel.anonymous().post("/users/sign-in", {"email": hotel.emails["staff"], "password": PASSWORD}, headers={"X-Forwarded-Proto": "https"})
    assert "secure" in _cookie_header(resp).lower()


def test_untrusted_forwarded_proto_does_not_change_the_cookie(hotel: Hotel) -> None:
    resp = hotel.anonymous().post("/users/sign-in", {"email": hotel.emails["staff"], "password": PASSWORD}, headers={"X-Forwarded-Proto": "https"})
    assert "secure" not in _cookie_header(resp).lower()


def test_wrong_password_is_401_with_one_message(hotel: Hotel) -> None:
    for email in (hotel.emails["staff"], "nobody@hotel.test"):
        resp = hotel.anonymous().post("/users/sign-in", {"email": email, "password": "wrong password"})
        assert resp.status_code == 401
        assert resp.json() == {"error": "Invalid email or password"}


def test_sign_in_rotates_the_session_id(hotel: Hotel) -> None:
    client = Client(hotel.base).sign_in(hotel.emails["staff"])
    old = client.cookie
    client.sign_in(hotel.emails["staff"])
    assert client.cookie != old
    stale = Client(hotel.base)
    stale.http.cookies.set("concierge_session", old)
    assert stale.get("/users/me").status_code == 401


def test_sign_out_revokes_the_session(hotel: Hotel) -> None:
    client = Client(hotel.base).sign_in(hotel.emails["staff"])
    sid = client.cookie
    assert client.post("/users/sign-out").status_code == 204
    replay = Client(hotel.base)
    replay.http.cookies.set("concierge_session", sid)
    assert replay.get("/users/me").status_code == 401


def test_idle_and_absolute_expiry(hotel: Hotel) -> None:
    clock = hotel.concierge.clock
    client = Client(hotel.base).sign_in(hotel.emails["staff"])
    idle = hotel.concierge.settings.session_idle_seconds
    clock.offset += idle - 120  # active within the idle window: stays valid and is refreshed
    assert client.get("/users/me").status_code == 200
    clock.offset += idle - 120
    assert client.get("/users/me").status_code == 200
    clock.offset += idle + 1  # idle too long
    assert client.get("/users/me").status_code == 401
    clock.offset = 0
    fresh = Client(hotel.base).sign_in(hotel.emails["staff"])
    for _ in range(hotel.concierge.settings.session_absolute_seconds // (idle - 60) + 1):
        clock.offset += idle - 60
        fresh.get("/users/me")
    assert fresh.get("/users/me").status_code == 401  # absolute lifetime reached despite activity
    clock.offset = 0


def test_switching_organization_rotates_and_changes_role(hotel: Hotel) -> None:
    staff = Client(hotel.base).sign_in(hotel.emails["staff"])
    other = Client(hotel.base)
    other.post("/users/sign-up", {"email": "boss@second.test", "password": PASSWORD, "name": "Boss", "organizationName": "Second Hotel"})
    other.sign_in("boss@second.test")
    invitation = other.post("/users/invitations", {"email": hotel.emails["staff"], "role": "manager"})
    assert invitation.status_code == 201
    assert staff.post("/users/invitations/accept", {"invitationId": invitation.json()["id"]}).status_code == 200
    second_org = other.me["auth"]["organizationId"]
    old = staff.cookie
    resp = staff.post("/users/switch-organization", {"organizationId": second_org})
    assert resp.status_code == 200
    assert resp.json()["auth"] == {"userId": staff.me["user"]["id"], "organizationId": second_org, "role": "manager"}
    assert staff.cookie != old
    staff.csrf = resp.json()["csrfToken"]
    assert staff.get("/users/me").json()["auth"]["role"] == "manager"


def test_role_change_applies_on_the_next_request_under_a_new_session_id(hotel: Hotel) -> None:
    user_id, email = hotel.new_user("guest", "Promoted")
    client = Client(hotel.base).sign_in(email)
    assert client.get("/cardex/guests").status_code == 403
    old = client.cookie
    members = hotel.client("admin").get("/users/memberships").json()["items"]
    mid = next(m["id"] for m in members if m["userId"] == user_id)
    assert hotel.client("admin").patch(f"/users/memberships/{mid}", {"role": "staff"}).status_code == 200
    promoted = client.get("/cardex/guests")
    assert promoted.status_code == 200
    assert client.cookie != old  # rotated on the privilege change
    assert client.post("/cardex/guests", {"firstName": "Still", "lastName": "Works"}).status_code == 201  # same CSRF token
    stale = Client(hotel.base)
    stale.http.cookies.set("concierge_session", old)
    assert stale.get("/users/me").status_code == 401


def test_only_an_owner_grants_owner(hotel: Hotel) -> None:
    resp = hotel.client("admin").post("/users/invitations", {"email": "new.owner@hotel.test", "role": "owner"})
    assert resp.status_code == 403 and resp.json() == {"error": "Only an owner can grant or change the owner role"}
    guest = next(m for m in hotel.client("admin").get("/users/memberships").json()["items"] if m["role"] == "guest")
    assert hotel.client("admin").patch(f"/users/memberships/{guest['id']}", {"role": "owner"}).status_code == 403
    assert hotel.client("owner").post("/users/invitations", {"email": "new.owner@hotel.test", "role": "owner"}).status_code == 201


def test_bearer_session_skips_csrf(hotel: Hotel) -> None:
    import requests

    sid = hotel.client("staff").cookie
    resp = requests.post(hotel.base + "/cardex/guests", json={"firstName": "Api", "lastName": "Client"}, headers={"Authorization": f"Bearer {sid}"}, timeout=10)
    assert resp.status_code == 201


def test_passwords_are_hashed_with_scrypt() -> None:
    hasher = PasswordHasher(n=2**14)
    stored = hasher.hash("secret password")
    assert stored.startswith("scrypt$16384$8$1$")
    assert hasher.verify("secret password", stored) and not hasher.verify("other", stored)


def test_hostile_cookie_headers_are_401_and_the_right_cookie_is_found_among_others(hotel: Hotel) -> None:
    import requests

    sid = hotel.client("staff").cookie
    url = hotel.base + "/users/me"
    for header in ("", ";;;", "concierge_session", "concierge_session=", "concierge_session=" + "x" * 5000, "=\x7f; \"; concierge_session=\"quoted\"", "a=b; concierge_session=nope"):
        resp = requests.get(url, headers={"Cookie": header}, timeout=10)
        assert resp.status_code == 401, header
    ok = requests.get(url, headers={"Cookie": f"theme=dark; concierge_session={sid}; other=1"}, timeout=10)
    assert ok.status_code == 200 and ok.json()["auth"]["role"] == "staff"
