"""/openapi: generated OpenAPI 3.1 from the route models; open in development, admin-only and opt-in in production."""

from __future__ import annotations

import re

import requests

from concierge.api import Access
from tests.concierge.conftest import Hotel, make_hotel


def test_development_serves_the_document_and_local_assets(hotel: Hotel) -> None:
    page = requests.get(hotel.base + "/openapi", timeout=10)
    assert page.status_code == 200 and "text/html" in page.headers["Content-Type"]
    assert not re.search(r"(src|href)=\"https?://", page.text)  # nothing from a CDN
    for src in re.findall(r"(?:src|href)=\"(/openapi/assets/[^\"]+)\"", page.text):
        assert requests.get(hotel.base + src, timeout=10).status_code == 200
    doc = requests.get(hotel.base + "/openapi/openapi.json", timeout=10).json()
    assert doc["openapi"] == "3.1.0"
    documented = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    declared = {(e.method, re.sub(r"<(\w+)>", r"{\1}", e.path)) for e in hotel.concierge.api.endpoints}
    assert documented == declared
    list_op = doc["paths"]["/cardex/guests"]["get"]
    assert {p["name"] for p in list_op["parameters"]} >= {"search", "vipOnly", "staying"}
    assert doc["paths"]["/cardex/confirm-arrival"]["post"]["requestBody"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/GuestAction"}
    assert doc["components"]["schemas"]["GuestAction"]["required"] == ["guestId"]


def test_production_hides_docs_unless_enabled(make_concierge) -> None:
    _, base = make_concierge(environment="production", openapi_enabled=False)
    assert requests.get(base + "/openapi", timeout=10).status_code == 404
    assert requests.get(base + "/openapi/openapi.json", timeout=10).status_code == 404


def test_production_with_docs_enabled_is_admin_only(make_concierge) -> None:
    concierge, base = make_concierge(environment="production", openapi_enabled=True)
    hotel = make_hotel(concierge, base)
    assert requests.get(base + "/openapi/openapi.json", timeout=10).status_code == 401
    assert hotel.client("staff").get("/openapi/openapi.json").status_code == 403
    assert hotel.client("manager").get("/openapi").status_code == 403
    assert hotel.client("admin").get("/openapi/openapi.json").status_code == 200
    assert hotel.client("owner").get("/openapi").status_code == 200


def test_every_route_documents_its_error_responses(hotel: Hotel) -> None:
    doc = hotel.concierge.openapi()
    for ep in hotel.concierge.api.endpoints:
        op = doc["paths"][re.sub(r"<(\w+)>", r"{\1}", ep.path)][ep.method.lower()]
        assert "default" in op["responses"]
        if ep.access is not Access.PUBLIC:
            assert "401" in op["responses"]
        if ep.body or ep.params or ep.query:
            assert "422" in op["responses"]
