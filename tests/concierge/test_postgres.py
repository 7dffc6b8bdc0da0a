"""PostgreSQL (DATABASE_URL) with the same migrations, against a real Debian PostgreSQL server."""

from __future__ import annotations

import pytest
import requests

from concierge.database import migrations
from tests.concierge.conftest import SseClient, make_hotel


@pytest.mark.slow
def test_the_api_runs_on_postgresql_with_the_same_migrations(make_concierge, postgres_url: str, tmp_path) -> None:
    first, base_a = make_concierge(database_url=postgres_url)
    second, base_b = make_concierge(database_url=postgres_url)  # a second instance: migrations already applied
    with first.db.transaction(write=False) as tx:
        versions = [r["version"] for r in tx.all("SELECT version FROM schema_migrations ORDER BY version")]
    assert versions == [n for n, _, _ in migrations()]

    hotel = make_hotel(first, base_a)
    staff = hotel.client("staff")
    guest, guest_client = hotel.guest_with_account("Pg")
    stream = SseClient(base_a, guest_client.cookie)
    try:
        assert stream.next_event()["event"] == "ready"
        assert staff.post("/cardex/confirm-arrival", {"guestId": guest["id"]}).json()["status"] == "arrived"
        assert stream.next_event()["data"]["status"] == "arrived"
    finally:
        stream.close()
    # the other instance sees the same data
    from tests.concierge.conftest import Client

    on_b = Client(base_b).sign_in(hotel.emails["staff"])
    assert on_b.get(f"/cardex/guests/{guest['id']}").json()["status"] == "arrived"
    assert {g["firstName"] for g in on_b.get("/cardex/guests", params={"search": "pg"}).json()["items"]} == {"Pg"}

    body = {"amount": 1000, "currency": "EUR"}
    created = staff.post("/payment/intents", body, headers={"Idempotency-Key": "pg-1"})
    replay = on_b.post("/payment/intents", body, headers={"Idempotency-Key": "pg-1"})  # same caller, other instance
    assert created.status_code == 201 and replay.json() == created.json() and replay.headers["Idempotent-Replayed"] == "true"
    again = staff.post("/payment/intents", body, headers={"Idempotency-Key": "pg-1"})
    assert again.json() == created.json() and again.headers["Idempotent-Replayed"] == "true"
    assert staff.post("/payment/intents", {**body, "amount": 5}, headers={"Idempotency-Key": "pg-1"}).status_code == 422
    dup = hotel.anonymous().post("/users/sign-up", {"email": hotel.emails["guest"], "password": "long enough password", "name": "Dup"})
    assert dup.status_code == 409  # a constraint violation inside a transaction stays a clean 409
    invited = hotel.client("admin").post("/users/invitations", {"email": "pg.invitee@hotel.test", "role": "staff"})
    assert invited.status_code == 201
    from tests.concierge.conftest import Client as _Client

    invitee = _Client(base_b)
    assert invitee.post("/users/sign-up", {"email": "pg.invitee@hotel.test", "password": "long enough password", "name": "Pg Invitee"}).status_code == 201
    invitee.sign_in("pg.invitee@hotel.test", "long enough password")
    assert invitee.post("/users/invitations/accept", {"invitationId": invited.json()["id"]}).json()["role"] == "staff"
    again = invitee.post("/users/invitations/accept", {"invitationId": invited.json()["id"]})
    assert again.status_code == 400 and again.json()["code"] == "INVALID_TRANSITION"
    assert [e["action"] for e in hotel.client("admin").get("/users/audit").json()["items"][:3]] == ["membership.created", "invitation.accepted", "invitation.created"]
    assert staff.get("/users/me").status_code == 200
    assert requests.get(base_a + "/analytics", cookies={"concierge_session": staff.cookie}, timeout=10).status_code == 200
