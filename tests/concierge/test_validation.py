"""Every route with inputs answers 422 {error: 'Validation failed', details} with per-field details."""

from __future__ import annotations

import pytest

from concierge.api import Endpoint
from tests.concierge.conftest import Hotel
from tests.concierge.test_access import ENDPOINTS, _id


def _bad_request(ep: Endpoint) -> tuple[str, dict]:
    """A request that breaks the route's schema: unknown body field, bad id in the path, or a bad query value."""
    import re

    path = re.sub(r"<(\w+)>", "bad id!", ep.path) if ep.params else ep.path
    kwargs: dict = {}
    if ep.body is not None:
        kwargs["json"] = {"definitelyNotAField": 1}
    elif ep.query is not None:
        # every query model here has a typed field; send the wrong type for the first constrained one
        field = next(iter(ep.query.model_fields.values()))
        alias = field.alias or next(iter(ep.query.model_fields))
        kwargs["params"] = {alias: "x" * 1000 if field.annotation is not bool else "not-a-bool"}
    return path, kwargs


@pytest.mark.parametrize("ep", [e for e in ENDPOINTS if e.body or e.params or e.query], ids=_id)
def test_invalid_input_gets_422_with_details(shared_hotel: Hotel, ep: Endpoint) -> None:
    path, kwargs = _bad_request(ep)
    client = shared_hotel.client("guest" if ep.access.value == "guest" else "owner")
    headers = {"Idempotency-Key": "k1", "Stripe-Signature": "t=1,v1=00"}
    resp = client.request(ep.method, path, headers=headers, **kwargs)
    assert resp.status_code == 422, resp.text
    body = resp.json()
    assert body["error"] == "Validation failed"
    assert body["details"] and all({"location", "field", "message"} <= set(d) for d in body["details"])


def test_all_field_errors_are_reported_in_one_pass(shared_hotel: Hotel) -> None:
    resp = shared_hotel.client("staff").post("/cardex/guests", {"firstName": "", "email": "nope", "vip": "maybe"})
    assert resp.status_code == 422
    fields = {d["field"] for d in resp.json()["details"]}
    assert {"firstName", "lastName", "email", "vip"} <= fields


def test_malformed_json_is_a_validation_error(shared_hotel: Hotel) -> None:
    resp = shared_hotel.client("staff").post("/cardex/confirm-arrival", data=b"{not json", headers={"Content-Type": "application/json"})
    assert resp.status_code == 422
    assert resp.json()["details"][0]["location"] == "body"


def test_query_booleans_are_validated(shared_hotel: Hotel) -> None:
    resp = shared_hotel.client("staff").get("/cardex/guests", params={"vipOnly": "perhaps"})
    assert resp.status_code == 422
    assert resp.json()["details"][0] == {"location": "query", "field": "vipOnly", "message": "Input should be a valid boolean, unable to interpret input", "type": "bool_parsing"}
