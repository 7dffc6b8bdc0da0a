"""Payment intents: Idempotency-Key (replay, other body 422, in flight 409), Stripe's lifecycle, signed webhooks."""

from __future__ import annotations

import json
import threading
import time

import requests

from concierge.payments import SandboxProvider, sign
from tests.concierge.conftest import Hotel, make_hotel

BODY = {"amount": 4500, "currency": "EUR", "description": "Spa package"}


def _create(client, key: str, body: dict = BODY) -> requests.Response:
    return client.post("/payment/intents", body, headers={"Idempotency-Key": key})


def _confirm(client, intent_id: str, method: str, key: str) -> requests.Response:
    return client.post("/payment/intents/confirm", {"intentId": intent_id, "paymentMethod": method}, headers={"Idempotency-Key": key})


def test_same_key_and_body_replays_the_stored_response(hotel: Hotel) -> None:
    staff = hotel.client("staff")
    first = _create(staff, "order-1")
    assert first.status_code == 201
    again = _create(staff, "order-1", {"description": "Spa package", "currency": "EUR", "amount": 4500})  # same body, other key order
    assert again.status_code == 201
    assert again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert len(staff.get("/payment/intents").json()["items"]) == 1
    assert hotel.concierge.services.payment_provider.create_calls == 1


def test_same_key_with_another_body_is_422(hotel: Hotel) -> None:
    staff = hotel.client("staff")
    _create(staff, "order-2")
    resp = _create(staff, "order-2", {**BODY, "amount": 9999})
    assert resp.status_code == 422
    assert resp.json()["error"] == "Validation failed"
    assert resp.json()["details"][0]["field"] == "Idempotency-Key"


def test_missing_idempotency_key_is_422(hotel: Hotel) -> None:
    resp = hotel.client("staff").post("/payment/intents", BODY)
    assert resp.status_code == 422
    assert resp.json()["details"][0]["field"] == "Idempotency-Key"


class HeldSandbox(SandboxProvider):
    """The sandbox whose calls wait until the test lets them go: a request stays in flight as long as the test
    needs, where a fixed latency could end before a loaded machine had sent the second request."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def _wait(self) -> None:
        assert self.release.wait(60), "the test never released the provider call"


def test_key_in_flight_is_409(make_concierge) -> None:
    concierge, base = make_concierge()
    provider = HeldSandbox()
    concierge.services.payments.provider = provider
    hotel = make_hotel(concierge, base)
    staff = hotel.client("staff")
    results: list[int] = []
    first = threading.Thread(target=lambda: results.append(_create(staff, "slow-1").status_code))
    first.start()

    def in_flight() -> bool:
        with concierge.db.transaction(write=False) as tx:
            return tx.one("SELECT state FROM idempotency_keys WHERE idem_key = 'slow-1'") is not None

    deadline = time.monotonic() + 10
    while not in_flight():  # the first request holds the key while the provider call runs
        assert time.monotonic() < deadline
        time.sleep(0.02)
    second = _create(hotel.client("staff"), "slow-1")
    provider.release.set()
    first.join(60)
    assert results == [201]
    assert second.status_code == 409
    assert second.json() == {"error": "A request with this Idempotency-Key is still being processed"}


def test_keys_are_scoped_per_caller(hotel: Hotel) -> None:
    a = _create(hotel.client("staff"), "shared-key")
    b = _create(hotel.client("manager"), "shared-key")
    assert a.status_code == b.status_code == 201
    assert a.json()["id"] != b.json()["id"]


def test_automatic_capture_succeeds(hotel: Hotel) -> None:
    staff = hotel.client("staff")
    intent = _create(staff, "auto-1").json()
    assert intent["status"] == "requires_payment_method"
    confirmed = _confirm(staff, intent["id"], "pm_card_visa", "auto-1-confirm")
    assert confirmed.status_code == 200 and confirmed.json()["status"] == "succeeded"
    replay = _confirm(staff, intent["id"], "pm_card_visa", "auto-1-confirm")
    assert replay.json() == confirmed.json()
    again = _confirm(staff, intent["id"], "pm_card_visa", "auto-1-confirm-2")
    assert again.status_code == 400 and again.json()["code"] == "INVALID_TRANSITION"
    assert again.json()["from"] == "succeeded"


def test_manual_capture_then_capture(hotel: Hotel) -> None:
    staff = hotel.client("staff")
    intent = _create(staff, "man-1", {**BODY, "captureMethod": "manual"}).json()
    held = _confirm(staff, intent["id"], "pm_card_visa", "man-1-c").json()
    assert held["status"] == "requires_capture"
    captured = staff.post("/payment/intents/capture", {"intentId": intent["id"]})
    assert captured.json()["status"] == "succeeded"
    cancel = staff.post("/payment/intents/cancel", {"intentId": intent["id"]})
    assert cancel.status_code == 400 and cancel.json() == {
        "error": "Cannot move payment intent from 'succeeded' to 'canceled'", "code": "INVALID_TRANSITION", "machine": "payment intent", "from": "succeeded", "to": "canceled"
    }


def test_declined_card_returns_to_requires_payment_method_then_retry(hotel: Hotel) -> None:
    staff = hotel.client("staff")
    intent = _create(staff, "dec-1").json()
    declined = _confirm(staff, intent["id"], "pm_card_chargeDeclined", "dec-1-a").json()
    assert declined["status"] == "requires_payment_method"
    assert declined["lastError"] == "Your card was declined."
    ok = _confirm(staff, intent["id"], "pm_card_visa", "dec-1-b").json()
    assert ok["status"] == "succeeded" and ok["lastError"] is None


def _webhook(base: str, secret: str, event: dict, signature: str | None = None) -> requests.Response:
    raw = json.dumps(event).encode()
    return requests.post(base + "/payment/webhooks", data=raw, headers={"Content-Type": "application/json", "Stripe-Signature": signature or sign(secret, raw)}, timeout=10)


def test_three_d_secure_completes_by_signed_webhook_once(hotel: Hotel) -> None:
    staff = hotel.client("staff")
    secret = hotel.concierge.settings.payment_webhook_secret
    intent = _create(staff, "3ds-1").json()
    pending = _confirm(staff, intent["id"], "pm_card_authenticationRequired", "3ds-1-c").json()
    assert pending["status"] == "requires_action"
    hotel.concierge.services.payment_provider.complete_action(intent["providerRef"])
    event = {"id": "evt_1", "type": "payment_intent.succeeded", "data": {"object": {"id": intent["providerRef"], "status": "succeeded"}}}
    first = _webhook(hotel.base, secret, event)
    assert first.status_code == 200 and first.json() == {"received": True, "duplicate": False}
    assert staff.get(f"/payment/intents/{intent['id']}").json()["status"] == "succeeded"
    dup = _webhook(hotel.base, secret, event)
    assert dup.json() == {"received": True, "duplicate": True}


def test_webhook_with_bad_signature_is_refused(hotel: Hotel) -> None:
    event = {"id": "evt_bad", "type": "payment_intent.succeeded", "data": {"object": {"id": "pi_x"}}}
    resp = _webhook(hotel.base, "whsec_wrong", event)
    assert resp.status_code == 400 and resp.json() == {"error": "Invalid webhook signature"}
    stale = _webhook(hotel.base, hotel.concierge.settings.payment_webhook_secret, event, sign(hotel.concierge.settings.payment_webhook_secret, json.dumps(event).encode(), timestamp=1))
    assert stale.status_code == 400


def test_guest_cannot_touch_payments(hotel: Hotel) -> None:
    assert _create(hotel.client("guest"), "g-1").status_code == 403
