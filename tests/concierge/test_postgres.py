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
    dup = hotel.client("admin").post("/users/memberships", {"email": hotel.emails["guest"], "role": "guest"})
    assert dup.status_code == 409  # a constraint violation inside a transaction stays a clean 409
    assert staff.get("/users/me").status_code == 200
    assert requests.get(base_a + "/analytics", cookies={"concierge_session": staff.cookie}, timeout=10).status_code == 200
