"""CORS from CORS_ORIGIN: exact origin echoed with credentials, never '*', unknown origins get nothing."""

from __future__ import annotations

import requests

from tests.concierge.conftest import PASSWORD, make_hotel

APP = "https://app.aurora.example"


def test_preflight_and_credentialed_request_from_an_allowed_origin(make_concierge) -> None:
    concierge, base = make_concierge(cors_origins=(APP, "https://staff.aurora.example"))
    hotel = make_hotel(concierge, base)
    pre = requests.options(base + "/cardex/confirm-arrival", headers={"Origin": APP, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type,x-csrf-token"}, timeout=10)
    assert pre.status_code == 204
    assert pre.headers["Access-Control-Allow-Origin"] == APP
    assert pre.headers["Access-Control-Allow-Credentials"] == "true"
    assert "X-CSRF-Token" in pre.headers["Access-Control-Allow-Headers"]
    staff = hotel.client("staff")
    staff.origin = APP
    resp = staff.get("/cardex/guests")
    assert resp.status_code == 200
    assert resp.headers["Access-Control-Allow-Origin"] == APP
    assert resp.headers["Access-Control-Allow-Credentials"] == "true"
    assert "Origin" in resp.headers["Vary"]
    err = requests.get(base + "/cardex/guests", headers={"Origin": APP}, timeout=10)
    assert err.status_code == 401 and err.headers["Access-Control-Allow-Origin"] == APP  # errors are readable too


def test_unknown_origin_gets_no_cors_headers(make_concierge) -> None:
    _, base = make_concierge(cors_origins=(APP,))
    pre = requests.options(base + "/users/sign-in", headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"}, timeout=10)
    assert pre.status_code == 403
    assert "Access-Control-Allow-Origin" not in pre.headers
    resp = requests.post(base + "/users/sign-in", json={"email": "a@b.co", "password": PASSWORD}, headers={"Origin": "https://evil.example"}, timeout=10)
    assert "Access-Control-Allow-Origin" not in resp.headers


def test_wildcard_origin_is_a_configuration_error() -> None:
    import pytest

    from concierge.errors import ConfigError
    from concierge.settings import Settings

    with pytest.raises(ConfigError, match="CORS_ORIGIN"):
        Settings.from_env({"CORS_ORIGIN": "*"})
    assert Settings.from_env({"CORS_ORIGIN": "https://a.example, https://b.example/"}).cors_origins == ("https://a.example", "https://b.example")
