"""Memberships by invitation, over the real server: the old enumeration/forced-membership attack is gone,
the invitation life cycle (accept, decline, revoke, expiry) follows its state machine, roles and owner
rules hold, hostile input is refused, and every step is in the audit trail."""

from __future__ import annotations

import threading

import pytest

from concierge.modules import invitations
from tests.concierge.conftest import PASSWORD, Client, Hotel, make_hotel


def _account(hotel: Hotel, email: str, org: str | None = None) -> Client:
    client = hotel.anonymous()
    body = {"email": email, "password": PASSWORD, "name": email.split("@")[0].title()}
    if org:
        body["organizationName"] = org
    assert client.post("/users/sign-up", body).status_code == 201
    return client.sign_in(email)


def _invite(admin: Client, email: str, role: str = "staff") -> dict:
    resp = admin.post("/users/invitations", {"email": email, "role": role})
    assert resp.status_code == 201, resp.text
    return resp.json()


def _actions(hotel: Hotel, n: int) -> list[str]:
    return [e["action"] for e in hotel.client("owner").get("/users/audit", params={"limit": n}).json()["items"]][::-1]


def _transition_error(resp, current: str, target: str) -> None:
    assert resp.status_code == 400, resp.text
    assert resp.json() == {"error": f"Cannot move invitation from '{current}' to '{target}'", "code": "INVALID_TRANSITION", "machine": "invitation", "from": current, "to": target}


def test_the_old_attack_yields_no_membership_and_no_difference_between_accounts(hotel: Hotel) -> None:
    victim = hotel.emails["guest"]
    attacker = _account(hotel, "mallory@evil.test", org="Evil Hotel")
    old = attacker.post("/users/memberships", {"email": victim, "role": "staff"})
    assert old.status_code == 405  # adding an account directly is no longer a route
    known = attacker.post("/users/invitations", {"email": victim, "role": "staff"})
    unknown = attacker.post("/users/invitations", {"email": "nobody.here@nowhere.test", "role": "staff"})
    assert known.status_code == unknown.status_code == 201

    def shape(resp) -> dict:
        return {k: v for k, v in resp.json().items() if k not in ("id", "email", "createdAt", "expiresAt")}

    assert shape(known) == shape(unknown) == {"organizationId": attacker.me["auth"]["organizationId"], "organizationName": "Evil Hotel", "role": "staff", "status": "pending", "respondedAt": None}
    volatile = {"date", "x-request-id", "content-length"}
    assert {k.lower() for k in known.headers} - volatile == {k.lower() for k in unknown.headers} - volatile
    mails = {m["To"]: m for m in hotel.concierge.mailer.messages()}
    assert mails[victim].get_content() == mails["nobody.here@nowhere.test"].get_content()  # the mail says nothing either
    victim_client = hotel.client("guest")
    assert [m["organizationName"] for m in victim_client.get("/users/me").json()["memberships"]] == ["Hotel Demo"]  # no stranger's hotel
    assert victim_client.post("/users/switch-organization", {"organizationId": attacker.me["auth"]["organizationId"]}).status_code == 404
    assert [i["organizationName"] for i in victim_client.get("/users/received-invitations").json()["items"]] == ["Evil Hotel"]  # the victim decides


def test_accepting_creates_the_membership_once_and_is_audited(hotel: Hotel) -> None:
    admin = hotel.client("admin")
    invitation = _invite(admin, "New.Hire@Hotel.test", "staff")
    assert invitation["email"] == "new.hire@hotel.test" and invitation["status"] == "pending"
    newcomer = _account(hotel, "new.hire@hotel.test")
    assert newcomer.get("/users/me").json()["memberships"] == []  # nothing until accepted
    received = newcomer.get("/users/received-invitations").json()["items"]
    assert [(i["id"], i["organizationName"], i["role"]) for i in received] == [(invitation["id"], "Hotel Demo", "staff")]
    accepted = newcomer.post("/users/invitations/accept", {"invitationId": invitation["id"]})
    assert accepted.status_code == 200
    assert accepted.json()["organizationId"] == hotel.org_id and accepted.json()["role"] == "staff"
    switched = newcomer.post("/users/switch-organization", {"organizationId": hotel.org_id})
    assert switched.json()["auth"]["role"] == "staff"
    newcomer.csrf = switched.json()["csrfToken"]
    assert newcomer.get("/cardex/guests").status_code == 200
    _transition_error(newcomer.post("/users/invitations/accept", {"invitationId": invitation["id"]}), "accepted", "accepted")
    _transition_error(newcomer.post("/users/invitations/decline", {"invitationId": invitation["id"]}), "accepted", "declined")
    _transition_error(admin.post("/users/invitations/revoke", {"invitationId": invitation["id"]}), "accepted", "revoked")
    assert newcomer.get("/users/received-invitations").json()["items"] == []
    assert admin.get(f"/users/invitations/{invitation['id']}").json()["status"] == "accepted"
    events = hotel.client("owner").get("/users/audit", params={"limit": 3}).json()["items"][::-1]
    assert [e["action"] for e in events] == ["invitation.created", "invitation.accepted", "membership.created"]
    assert events[0]["actorId"] == admin.me["user"]["id"] and events[0]["detail"] == {"email": "new.hire@hotel.test", "role": "staff"}
    assert events[2]["subjectId"] == accepted.json()["id"] and events[2]["detail"]["role"] == "staff"


def test_declined_and_revoked_invitations_create_nothing(hotel: Hotel) -> None:
    admin = hotel.client("admin")
    first = _invite(admin, "decliner@hotel.test")
    second = _invite(admin, "revoked@hotel.test", "manager")
    decliner = _account(hotel, "decliner@hotel.test")
    declined = decliner.post("/users/invitations/decline", {"invitationId": first["id"]})
    assert declined.status_code == 200 and declined.json()["status"] == "declined" and declined.json()["respondedAt"]
    _transition_error(decliner.post("/users/invitations/accept", {"invitationId": first["id"]}), "declined", "accepted")
    revoked = admin.post("/users/invitations/revoke", {"invitationId": second["id"]})
    assert revoked.status_code == 200 and revoked.json()["status"] == "revoked"
    late = _account(hotel, "revoked@hotel.test")
    assert late.get("/users/received-invitations").json()["items"] == []
    _transition_error(late.post("/users/invitations/accept", {"invitationId": second["id"]}), "revoked", "accepted")
    assert decliner.get("/users/me").json()["memberships"] == [] and late.get("/users/me").json()["memberships"] == []
    assert _actions(hotel, 4) == ["invitation.created", "invitation.created", "invitation.declined", "invitation.revoked"]
    assert [i["status"] for i in admin.get("/users/invitations", params={"status": "pending"}).json()["items"]] == []


def test_invitations_expire(make_concierge) -> None:
    concierge, base = make_concierge(invitation_ttl_seconds=3600)  # shorter than a session's idle expiry
    hotel = make_hotel(concierge, base)
    admin = hotel.client("admin")
    invitation = _invite(admin, "slow@hotel.test")
    slow = _account(hotel, "slow@hotel.test")
    hotel.concierge.clock.offset += hotel.concierge.settings.invitation_ttl_seconds + 1
    try:
        assert slow.get("/users/received-invitations").json()["items"] == []
        _transition_error(slow.post("/users/invitations/accept", {"invitationId": invitation["id"]}), "expired", "accepted")
        assert admin.get(f"/users/invitations/{invitation['id']}").json()["status"] == "expired"
        assert slow.get("/users/me").json()["memberships"] == []
        assert _actions(hotel, 2) == ["invitation.created", "invitation.expired"]  # recorded once, by time (no actor)
        assert hotel.client("owner").get("/users/audit", params={"limit": 1}).json()["items"][0]["actorId"] is None
        again = _invite(admin, "slow@hotel.test")  # an expired invitation does not block a new one
        assert slow.post("/users/invitations/accept", {"invitationId": again["id"]}).status_code == 200
    finally:
        hotel.concierge.clock.offset = 0


def test_an_invitation_is_only_for_its_address_and_its_organization(hotel: Hotel) -> None:
    invitation = _invite(hotel.client("admin"), "someone@hotel.test")
    for client in (hotel.client("staff"), _account(hotel, "other@hotel.test")):
        assert client.post("/users/invitations/accept", {"invitationId": invitation["id"]}).status_code == 404
        assert client.post("/users/invitations/decline", {"invitationId": invitation["id"]}).json() == {"error": "Invitation not found"}
    foreign = _account(hotel, "boss@second.test", org="Second Hotel")
    assert foreign.get(f"/users/invitations/{invitation['id']}").status_code == 404
    assert foreign.post("/users/invitations/revoke", {"invitationId": invitation["id"]}).status_code == 404
    assert foreign.get("/users/invitations").json()["items"] == []
    assert _account(hotel, "someone@hotel.test").post("/users/invitations/accept", {"invitationId": invitation["id"]}).status_code == 200


def test_only_admins_invite_and_only_owners_invite_owners(hotel: Hotel) -> None:
    for role in ("guest", "staff", "manager"):
        assert hotel.client(role).post("/users/invitations", {"email": "x@hotel.test", "role": "guest"}).status_code == 403
    assert hotel.client("admin").post("/users/invitations", {"email": "x@hotel.test", "role": "owner"}).status_code == 403
    owner_invite = _invite(hotel.client("owner"), "co.owner@hotel.test", "owner")
    assert hotel.client("admin").post("/users/invitations/revoke", {"invitationId": owner_invite["id"]}).status_code == 403
    assert _account(hotel, "co.owner@hotel.test").post("/users/invitations/accept", {"invitationId": owner_invite["id"]}).json()["role"] == "owner"


def test_owner_rules(hotel: Hotel) -> None:
    owner, admin = hotel.client("owner"), hotel.client("admin")
    members = {m["role"]: m for m in admin.get("/users/memberships").json()["items"]}
    first_owner = members["owner"]
    assert admin.patch(f"/users/memberships/{first_owner['id']}", {"role": "staff"}).status_code == 403  # admins cannot demote owners
    assert admin.put(f"/users/memberships/{first_owner['id']}", {"role": "admin"}).status_code == 403
    assert admin.delete(f"/users/memberships/{first_owner['id']}").status_code == 403
    last = owner.post("/users/memberships/leave", {"organizationId": hotel.org_id})
    assert last.status_code == 400 and "last owner" in last.json()["error"]
    assert owner.patch(f"/users/memberships/{first_owner['id']}", {"role": "admin"}).status_code == 400  # nor demote themselves
    second = _account(hotel, "second.owner@hotel.test")
    second.post("/users/invitations/accept", {"invitationId": _invite(owner, "second.owner@hotel.test", "owner")["id"]})
    assert admin.patch(f"/users/memberships/{first_owner['id']}", {"role": "staff"}).status_code == 403  # still not by an admin
    assert owner.post("/users/memberships/leave", {"organizationId": hotel.org_id}).status_code == 204  # now one owner remains
    assert owner.get("/users/me").json()["memberships"] == []
    assert owner.get("/cardex/guests").status_code == 403  # the old session no longer carries the role
    roles = [m["role"] for m in admin.get("/users/memberships").json()["items"]]
    assert roles.count("owner") == 1
    guest = next(m for m in admin.get("/users/memberships").json()["items"] if m["role"] == "guest")
    assert admin.patch(f"/users/memberships/{guest['id']}", {"role": "staff"}).status_code == 200
    assert admin.delete(f"/users/memberships/{guest['id']}").status_code == 204
    tail = [e for e in hotel.client("admin").get("/users/audit", params={"limit": 3}).json()["items"]][::-1]
    assert [e["action"] for e in tail] == ["membership.left", "membership.role_changed", "membership.removed"]
    assert tail[1]["detail"] == {"userId": guest["userId"], "from": "guest", "to": "staff"}


def test_hostile_invitation_requests_are_refused_and_the_server_keeps_serving(hotel: Hotel, monkeypatch: pytest.MonkeyPatch) -> None:
    admin = hotel.client("admin")
    for body in (
        {"email": "not-an-address", "role": "staff"},
        {"email": "a" * 250 + "@x.test", "role": "staff"},
        {"email": "ok@hotel.test", "role": "superuser"},
        {"email": "ok@hotel.test", "role": "staff", "organizationId": "org_other"},
        {"email": ["ok@hotel.test"], "role": "staff"},
        {},
    ):
        resp = admin.post("/users/invitations", body)
        assert resp.status_code == 422, body
        assert resp.json()["error"] == "Validation failed"
    assert admin.post("/users/invitations", data=b"\xff\xfe{", headers={"Content-Type": "application/json"}).status_code == 422
    assert admin.post("/users/invitations", {"email": "ok@hotel.test", "role": "staff"}, csrf=False).status_code == 403
    for bad_id in ("../../etc/passwd", "x" * 65, ""):
        assert hotel.client("guest").post("/users/invitations/accept", {"invitationId": bad_id}).status_code == 422
    _invite(admin, "dup@hotel.test")
    assert admin.post("/users/invitations", {"email": "DUP@hotel.test", "role": "guest"}).status_code == 409
    assert admin.post("/users/invitations", {"email": hotel.emails["staff"], "role": "guest"}).status_code == 409  # already a member
    monkeypatch.setattr(invitations, "MAX_PENDING_PER_ORGANIZATION", 3)
    _invite(admin, "p2@hotel.test")
    _invite(admin, "p3@hotel.test")
    capped = admin.post("/users/invitations", {"email": "p4@hotel.test", "role": "guest"})
    assert capped.status_code == 400 and "At most 3 pending" in capped.json()["error"]
    assert len(admin.get("/users/invitations").json()["items"]) == 3
    assert hotel.client("staff").get("/cardex/guests").status_code == 200


def test_concurrent_accepts_create_one_membership(hotel: Hotel) -> None:
    invitation = _invite(hotel.client("admin"), "racer@hotel.test")
    _account(hotel, "racer@hotel.test")
    clients = [Client(hotel.base).sign_in("racer@hotel.test") for _ in range(6)]
    statuses: list[int] = []
    barrier = threading.Barrier(len(clients))

    def accept(client: Client) -> None:
        barrier.wait()
        statuses.append(client.post("/users/invitations/accept", {"invitationId": invitation["id"]}).status_code)

    threads = [threading.Thread(target=accept, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(statuses) == [200] + [400] * 5
    assert len(clients[0].get("/users/me").json()["memberships"]) == 1
    assert _actions(hotel, 3) == ["invitation.created", "invitation.accepted", "membership.created"]



def test_oversized_and_slow_invitation_bodies_do_not_hold_up_the_server(hotel: Hotel) -> None:
    import socket
    import time

    admin = hotel.client("admin")
    huge = admin.post("/users/invitations", {"email": "big@hotel.test", "role": "staff", "padding": "x" * 2_000_000})
    assert huge.status_code in (413, 422) and "error" in huge.json()
    host, port = hotel.base.removeprefix("http://").split(":")
    slow = socket.create_connection((host, int(port)))
    try:
        head = (
            f"POST /users/invitations HTTP/1.1\r\nHost: {host}\r\nCookie: concierge_session={admin.cookie}\r\nX-CSRF-Token: {admin.csrf}\r\n"
            "Content-Type: application/json\r\nContent-Length: 60\r\n\r\n{\"email\": \"slow@hotel"
        )
        slow.sendall(head.encode())  # and then nothing more: the body never completes
        started = time.monotonic()
        for _ in range(5):
            assert admin.get("/users/invitations").status_code == 200
        # Other requests are served meanwhile: a worker held by the slow body would make them wait for the
        # server's 30 s socket timeout (and the client's), far beyond what a loaded machine adds.
        assert time.monotonic() - started < 15
    finally:
        slow.close()
    assert [i["email"] for i in admin.get("/users/invitations").json()["items"]] == []  # neither body created anything
    assert _actions(hotel, 1) != ["invitation.created"]
