"""The console's typed API client cannot drift from the appliance: every endpoint it calls on /api/v1 must be
in the OpenAPI document the running appliance serves, with the same method."""

from __future__ import annotations

import json
import re
from pathlib import Path

ENDPOINTS = Path(__file__).resolve().parents[2] / "console" / "src" / "api" / "endpoints.json"


def _client_endpoints() -> dict[str, dict[str, str]]:
    table = json.loads(ENDPOINTS.read_text())
    return {name: spec for name, spec in table.items() if not name.startswith("_")}


def test_every_appliance_endpoint_the_console_calls_is_in_the_openapi_document(appliance) -> None:
    status, document = appliance.rest.get("/api/v1/openapi.json")
    assert status == 200
    paths = document["paths"]
    checked, missing = [], []
    for name, spec in _client_endpoints().items():
        if spec.get("origin") == "dashboard" or spec.get("pending"):
            continue
        operations = paths.get(spec["path"], {})
        if spec["method"].lower() not in operations:
            missing.append(f"{name}: {spec['method']} {spec['path']}")
        checked.append(name)
    assert not missing, f"the console calls endpoints the appliance does not document: {missing}"
    assert len(checked) >= 25


def test_pending_endpoints_are_really_absent_so_the_marker_is_removed_when_they_land(appliance) -> None:
    status, document = appliance.rest.get("/api/v1/openapi.json")
    assert status == 200
    for name, spec in _client_endpoints().items():
        if spec.get("pending"):
            assert spec["method"].lower() not in document["paths"].get(spec["path"], {}), (
                f"{name} now exists in the appliance: drop its `pending` marker in endpoints.json")


def test_path_parameters_match_the_document_names() -> None:
    for name, spec in _client_endpoints().items():
        for param in re.findall(r"\{([^}]+)\}", spec["path"]):
            assert re.fullmatch(r"[a-z_]+", param), f"{name}: parameter {param!r}"
