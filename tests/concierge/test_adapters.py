"""The real adapters (Apaleo, Stripe, OpenAI-compatible) over HTTP against loopback fakes of those services."""

from __future__ import annotations

import time
import urllib.parse
from typing import Iterator

import pytest

from concierge.ai import OpenAiCompatible
from concierge.payments import StripeProvider
from concierge.pms import ApaleoPms
from tests.concierge.conftest import make_hotel
from tests.concierge.fakes import FakeApaleo, FakeLlm, FakeStripe


def _apaleo_reservation(i: int, status: str = "Confirmed") -> dict:
    return {
        "id": f"ABCD-{i}",
        "status": status,
        "arrival": "2030-06-01T15:00:00+02:00",
        "departure": "2030-06-03T11:00:00+02:00",
        "unit": {"id": f"U{i}", "name": f"{200 + i}"},
        "primaryGuest": {"firstName": f"Ana{i}", "lastName": "Apaleo", "email": f"ana{i}@mail.test", "phone": "+49 30 1234"},
    }


@pytest.fixture
def apaleo() -> Iterator[FakeApaleo]:
    fake = FakeApaleo("client", "s3cret", "BER", [_apaleo_reservation(i) for i in range(1, 6)])
    yield fake
    fake.close()


def test_apaleo_full_sync_and_check_in_through_the_outbox(make_concierge, apaleo: FakeApaleo) -> None:
    pms = ApaleoPms("client", "s3cret", "BER", apaleo.url, apaleo.url)
    concierge, base = make_concierge(pms=pms)
    concierge.outbox.base_delay = 0.1
    hotel = make_hotel(concierge, base)
    staff = hotel.client("staff")
    run = staff.post("/integrations/full-sync", {"pageSize": 2}).json()
    assert (run["status"], run["fetched"], run["created"]) == ("completed", 5, 5)
    guest = staff.get("/cardex/guests", params={"search": "ana3"}).json()["items"][0]
    assert (guest["lastName"], guest["room"], guest["arrivalDate"], guest["pmsReservationId"], guest["status"]) == ("Apaleo", "203", "2030-06-01", "ABCD-3", "expected")
    apaleo.down = 1  # the first check-in attempt meets an outage
    assert staff.post("/cardex/confirm-arrival", {"guestId": guest["id"]}).status_code == 200
    deadline = time.monotonic() + 10
    while apaleo.reservations["ABCD-3"]["status"] != "InHouse":
        assert time.monotonic() < deadline, "check-in never reached Apaleo"
        time.sleep(0.05)
    puts = [r for r in apaleo.requests if r[0] == "PUT"]
    assert [urllib.parse.urlsplit(p[1]).path for p in puts] == ["/booking/v1/reservation-actions/ABCD-3/checkin"] * 2
    assert puts[-1][2]["authorization"].startswith("Bearer ")
    token_calls = [r for r in apaleo.requests if r[1] == "/connect/token"]
    assert len(token_calls) == 1  # the access token is reused until it expires


def test_apaleo_statuses_map_onto_the_check_in_machine(make_concierge, apaleo: FakeApaleo) -> None:
    apaleo.reservations["ABCD-9"] = _apaleo_reservation(9, status="Canceled")
    concierge, base = make_concierge(pms=ApaleoPms("client", "s3cret", "BER", apaleo.url, apaleo.url))
    hotel = make_hotel(concierge, base)
    staff = hotel.client("staff")
    staff.post("/integrations/full-sync", {})
    guest = staff.get("/cardex/guests", params={"search": "ana9"}).json()["items"][0]
    assert guest["status"] == "canceled"
    assert staff.post("/cardex/confirm-arrival", {"guestId": guest["id"]}).json()["code"] == "INVALID_TRANSITION"


def test_stripe_adapter_creates_confirms_and_forwards_idempotency_keys(make_concierge) -> None:
    stripe = FakeStripe("sk_test_123")
    try:
        concierge, base = make_concierge()
        concierge.services.payments.provider = StripeProvider("sk_test_123", stripe.url)
        hotel = make_hotel(concierge, base)
        staff = hotel.client("staff")
        intent = staff.post("/payment/intents", {"amount": 12000, "currency": "EUR", "captureMethod": "manual"}, headers={"Idempotency-Key": "k-1"}).json()
        assert intent["provider"] == "stripe" and intent["providerRef"].startswith("pi_")
        created = stripe.requests[0]
        assert created[2]["idempotency-key"].endswith(":k-1")
        assert urllib.parse.parse_qs(created[3].decode())["currency"] == ["eur"]
        declined = staff.post("/payment/intents/confirm", {"intentId": intent["id"], "paymentMethod": "pm_card_chargeDeclined"}, headers={"Idempotency-Key": "k-2"}).json()
        assert declined["status"] == "requires_payment_method" and declined["lastError"] == "Your card was declined."
        held = staff.post("/payment/intents/confirm", {"intentId": intent["id"], "paymentMethod": "pm_card_visa"}, headers={"Idempotency-Key": "k-3"}).json()
        assert held["status"] == "requires_capture"
        assert staff.post("/payment/intents/capture", {"intentId": intent["id"]}).json()["status"] == "succeeded"
        assert stripe.intents[intent["providerRef"]]["status"] == "succeeded"
    finally:
        stripe.close()


def test_openai_compatible_adapter_answers_from_the_hotel_knowledge(make_concierge) -> None:
    seen: list[list[dict[str, str]]] = []

    def reply(messages: list[dict[str, str]]) -> str:
        seen.append(messages)
        return "Breakfast is from 6:30 to 10:30 in the Aurora Restaurant."

    llm = FakeLlm("sk-llm", reply)
    try:
        concierge, base = make_concierge()
        concierge.services.ai.provider = OpenAiCompatible(llm.url + "/v1", "sk-llm", "small-model")
        hotel = make_hotel(concierge, base)
        hotel.client("staff").post("/ai/knowledge", {"kind": "hours", "title": "Breakfast hours", "body": "Breakfast 6:30-10:30, Aurora Restaurant."})
        answer = hotel.client("guest").post("/ai/ask", {"question": "When is breakfast?"}).json()
        assert answer == {"answer": "Breakfast is from 6:30 to 10:30 in the Aurora Restaurant.", "sources": [], "confident": True, "provider": "openai"}
        assert "Breakfast 6:30-10:30" in seen[0][0]["content"] and seen[0][1] == {"role": "user", "content": "When is breakfast?"}
        llm.down = 5  # the endpoint fails: the chat still answers and leaves the thread to staff
        _, guest = hotel.guest_with_account("Llm")
        thread = guest.post("/chat/threads", {"subject": "Q", "message": "Is the pool open?"}).json()
        assert thread["messages"][1]["author"] == "ai" and "staff" in thread["messages"][1]["body"]
        failed = hotel.client("guest").post("/ai/ask", {"question": "Pool?"})
        assert failed.status_code == 502 and failed.json() == {"error": "Upstream provider failed, retry later"}
    finally:
        llm.close()
