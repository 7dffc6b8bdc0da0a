"""One error shape everywhere: 401, 403, 404, 400 INVALID_TRANSITION, 422, 409, 503 and a logged 500 with a request id."""

from __future__ import annotations

import logging

import pytest

from concierge.api import Access, Endpoint
from tests.concierge.conftest import Hotel


def test_unknown_route_is_404_json(hotel: Hotel) -> None:
    resp = hotel.anonymous().get("/nowhere")
    assert resp.status_code == 404
    assert resp.json() == {"error": "Not found"}
    assert resp.headers["X-Request-Id"]


def test_missing_resource_is_404_json(hotel: Hotel) -> None:
    resp = hotel.client("staff").get("/cardex/guests/gst_missing")
    assert resp.status_code == 404
    assert resp.json() == {"error": "Guest not found"}


def test_wrong_method_is_405_json(hotel: Hotel) -> None:
    resp = hotel.client("staff").request("PUT", "/cardex/confirm-arrival", json={})
    assert resp.status_code == 405
    assert resp.json() == {"error": "Method not allowed"}


def test_business_rule_refusal_is_400_not_403(hotel: Hotel) -> None:
    guest = hotel.client("staff").post("/cardex/guests", {"firstName": "No", "lastName": "Mail"}).json()
    resp = hotel.client("staff").post("/cardex/send-check-in-email", {"guestId": guest["id"]})
    assert resp.status_code == 400
    assert resp.json() == {"error": "This guest has no email address"}


def test_unexpected_exception_is_500_logged_with_the_request_id(hotel: Hotel, caplog: pytest.LogCaptureFixture) -> None:
    def broken(call: object) -> None:
        raise RuntimeError("database on fire")

    hotel.concierge.api.route(Endpoint("GET", "/test-only/broken", "raises", Access.PUBLIC))(broken)
    with caplog.at_level(logging.ERROR, logger="concierge.http"):
        resp = hotel.anonymous().get("/test-only/broken", headers={"X-Request-Id": "req-test-12345"})
    assert resp.status_code == 500
    assert resp.json() == {"error": "Internal server error"}
    assert resp.headers["X-Request-Id"] == "req-test-12345"
    logged = [r for r in caplog.records if "req-test-12345" in r.getMessage()]
    assert logged and logged[0].exc_info and "database on fire" in str(logged[0].exc_info[1])


def test_request_id_is_generated_when_absent_or_unsafe(hotel: Hotel) -> None:
    resp = hotel.anonymous().get("/users/me", headers={"X-Request-Id": "bad id <script>"})
    rid = resp.headers["X-Request-Id"]
    assert rid != "bad id <script>" and len(rid) == 16


def test_duplicate_email_is_409(hotel: Hotel) -> None:
    resp = hotel.anonymous().post("/users/sign-up", {"email": hotel.emails["staff"], "password": "long enough password", "name": "Dup"})
    assert resp.status_code == 409
    assert set(resp.json()) == {"error"}


def test_configuration_errors_name_every_bad_key_and_value_at_once() -> None:
    from concierge.errors import ConfigError
    from concierge.settings import Settings

    with pytest.raises(ConfigError) as caught:
        Settings.from_env({"PORT": "eighty", "OPENAPI_ENABLED": "sometimes", "DATABASE_URL": "mysql://x", "PAYMENT_PROVIDER": "stripe"})
    message = str(caught.value)
    for expected in ("PORT='eighty'", "OPENAPI_ENABLED='sometimes'", "DATABASE_URL='mysql://x'", "STRIPE_API_KEY is required"):
        assert expected in message
