"""Every REST route declares its reply; the OpenAPI document covers them and validates; with
`rest.check_replies` on (the test fixtures' setting) a reply that breaks its declaration is a loud 500."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import bottle
import pytest
from openapi_spec_validator import validate
from pydantic import BaseModel

from appliance.model import FlowRecord
from appliance.rest import routes_core
from appliance.rest.api import Api, Media, RouteSpec
from appliance.rest.openapi import build_openapi
from appliance.rest.server import HttpServer
from appliance.generated import sensor_pb2
from tests.appliance import wire
from tests.appliance.rest.test_console_routes import _add


def _operation(document: dict[str, Any], spec: RouteSpec) -> dict[str, Any]:
    path = re.sub(r"<([^>:]+)(:[^>]*)?>", r"{\1}", spec.path)
    return document["paths"][path][spec.method.lower()]


def test_every_route_in_the_table_declares_its_reply_and_a_route_without_one_is_refused(appliance) -> None:
    routes = appliance.app.api.routes
    assert len(routes) >= 36
    for spec in routes:
        assert isinstance(spec.reply, Media) or issubclass(spec.reply, BaseModel), f"{spec.method} {spec.path}"
        if spec.method == "PUT":
            assert spec.body is not None, f"{spec.method} {spec.path} takes a body but declares none"
    api = Api("token")
    with pytest.raises(TypeError, match="declare its reply"):
        api.route("GET", "/x", "no reply")(lambda: {})


def test_the_openapi_document_validates_and_gives_every_route_its_reply_schema(appliance) -> None:
    status, document = appliance.rest.get("/api/v1/openapi.json")
    assert status == 200
    validate(document)  # raises on any violation of the OpenAPI 3.1 schema (and of JSON Schema in the components)
    schemas = document["components"]["schemas"]
    operations = 0
    for spec in appliance.app.api.routes:
        op = _operation(document, spec)
        operations += 1
        content = op["responses"][str(spec.status)]["content"]
        if isinstance(spec.reply, Media):
            assert set(spec.reply.types) <= set(content), spec.path
        else:
            ref = content["application/json"]["schema"]["$ref"]
            assert ref == f"#/components/schemas/{spec.reply.__name__}" and schemas[spec.reply.__name__]["properties"]
        if isinstance(spec.body, type):
            assert op["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(spec.body.__name__)
    assert operations == sum(len(methods) for methods in document["paths"].values())
    # The replies the issue named as undocumented.
    alert = schemas["AlertReply"]["properties"]
    assert {"severity", "detections", "status"} <= set(alert)
    assert "totalPackets" in schemas["MetricsReply"]["properties"]
    assert schemas["SignaturesState"]["properties"]["rules"]["items"]["$ref"].endswith("RuleInFile")
    # The rule body is documented from the rule tables, and the error shape carries the structured fields.
    assert "conditions" in schemas["RuleBody"]["required"]
    assert "fields" in schemas["ErrorReply"]["properties"]
    assert set(document["paths"]["/api/v1/whitelist"]["post"]["responses"]) == {"201", "401", "422", "default"}
    assert set(document["paths"]["/api/status"]["get"]["responses"]) == {"200", "default"}
    # Query parameters are typed from the same Param the route reads them with.
    flows = {p["name"]: p["schema"] for p in document["paths"]["/api/v1/flows"]["get"]["parameters"]}
    assert flows["limit"] == {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}
    assert flows["state"] == {"enum": ["active", "finished"]} and flows["agent_id"]["maxLength"] == 64
    status, body = appliance.rest.get("/api/v1/flows?limit=1001")
    assert status == 422 and body["field"] == "limit"


def test_real_replies_of_every_read_route_hold_to_their_models(appliance) -> None:
    """With data behind every GET route (an agent, its flows and events, an alert, an exclusion), each reply
    passes the check mode's strict model validation, or the route would answer 500."""
    app, rest = appliance.app, appliance.rest
    stub = appliance.stub()
    reply = stub.StreamPacketBatches(iter([sensor_pb2.PacketBatch(packets=[
        wire.packet(ts_ms=1_700_000_000_000 + i, remote=f"3.3.3.{i + 1}") for i in range(3)])]),
        metadata=[("x-machine-id", "contract")])
    assert app.pipeline.drain()
    alert = _add(app)
    assert rest.post("/api/v1/whitelist", {"value": "good.example"})[0] == 201
    flows = rest.get("/api/v1/flows")[1]["flows"]
    ids = {"flow_id": flows[0]["id"], "agent_id": reply.agent_id, "alert_id": alert.id}
    for spec in app.api.routes:
        if spec.method != "GET" or spec.path.startswith(("/static", "/api/v1/enroll")):
            continue
        path = re.sub(r"<([^>:]+)>", lambda m: ids[m.group(1)], spec.path)
        status, body = rest.get(path)
        assert status == 200, (path, body)
    assert rest.get("/api/v1/alerts/export?format=json")[0] == 200


class Small(BaseModel):
    name: str
    count: int


@pytest.fixture
def served() -> Iterator[tuple[Api, str]]:
    """A bare Api in check mode behind the real HTTP front, on a loopback port of its own."""
    api = Api("t0ken", check_replies=True)
    server = HttpServer(api.app, "127.0.0.1", 0, threads=2, name="contract")
    server.start()
    try:
        yield api, f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()


def _get(url: str) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, headers={"Authorization": "Bearer t0ken"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


BROKEN: dict[str, Any] = {
    "extra": lambda: {"name": "a", "count": 1, "secret": "leaks"},
    "missing": lambda: {"name": "a"},
    "wrong_type": lambda: {"name": "a", "count": "1"},
    "null": lambda: {"name": None, "count": 1},
    "media": lambda: bottle.HTTPResponse("a,1", status=200, headers={"Content-Type": "text/csv"}),
    "status": lambda: bottle.HTTPResponse('{"name": "a", "count": 1}', status=202,
                                          headers={"Content-Type": "application/json"}),
}


def _raw(url: str) -> tuple[int, str, bytes]:
    request = urllib.request.Request(url, headers={"Authorization": "Bearer t0ken"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return answer.status, answer.headers.get("Content-Type", ""), answer.read()


def test_a_reply_that_breaks_its_model_is_a_loud_500_in_check_mode(served, caplog) -> None:
    api, base = served
    api.route("GET", "/good", "a good reply", reply=Small)(lambda: {"name": "a", "count": 1})
    for name, handler in BROKEN.items():
        api.route("GET", f"/broken/{name}", "a broken reply", reply=Small)(handler)
    csv = Media(("text/csv",), "rows")
    api.route("GET", "/file", "a declared CSV", reply=csv)(BROKEN["media"])
    api.route("GET", "/broken/file", "JSON where a CSV is declared", reply=csv)(lambda: {"name": "a", "count": 1})
    assert _get(base + "/good") == (200, {"name": "a", "count": 1})
    assert _raw(base + "/file") == (200, "text/csv", b"a,1")
    caplog.set_level(logging.ERROR, logger="appliance.rest.api")
    broken = [*BROKEN, "file"]
    for name in broken:
        status, body = _get(f"{base}/broken/{name}")
        assert (status, body) == (500, {"error": "Internal server error"}), name
    logged = {r.getMessage() for r in caplog.records if r.exc_info and r.exc_info[0].__name__ == "ReplyContractError"}
    assert logged == {f"unhandled error in GET /broken/{name}" for name in broken}


def test_production_does_not_pay_for_the_check(tmp_path) -> None:
    """Check mode off (the default): the handler's reply goes out as built, unvalidated."""
    api = Api("t0ken")
    api.route("GET", "/loose", "a loose reply", reply=Small)(BROKEN["wrong_type"])
    server = HttpServer(api.app, "127.0.0.1", 0, threads=2, name="contract")
    server.start()
    try:
        assert _get(f"http://127.0.0.1:{server.port}/loose") == (200, {"name": "a", "count": "1"})
    finally:
        server.stop()


def test_flow_replies_copy_the_record_attributes_of_the_same_name() -> None:
    """A new flow attribute reaches the API with one line in FlowReply: every copied field is a FlowRecord attribute."""
    record_fields = {f.name for f in dataclasses.fields(FlowRecord)}
    assert routes_core._FLOW_COPIED and set(routes_core._FLOW_COPIED) <= record_fields


def test_the_table_document_is_the_served_document(appliance) -> None:
    assert appliance.rest.get("/api/v1/openapi.json")[1] == json.loads(json.dumps(build_openapi(appliance.app.api.routes)))


HOSTILE_BODIES = [
    (b"not json", 400),
    (b"[1, 2]", 422),
    (b'{"unknown_field_x": 1}', 422),
    (b'{"a": ' * 3000 + b"1" + b"}" * 3000, 400),  # nesting deeper than the parser goes
]  # oversized bodies are refused by the HTTP front on their Content-Length (test_server_hardening.py)


def test_every_json_body_route_refuses_hostile_bodies_before_its_handler_and_keeps_serving(appliance) -> None:
    """The framework parses every declared JSON body: each hostile body gets its documented status on every such
    route, nothing changes (settings, config, rules, exclusions), and the server answers afterwards."""
    rest = appliance.rest
    before = {path: rest.get(path)[1] for path in ("/api/v1/settings", "/api/v1/config", "/api/v1/whitelist",
                                                   "/api/v1/signatures")}
    routes = [spec for spec in appliance.app.api.routes if isinstance(spec.body, type)]
    assert len(routes) >= 9  # bulk, status, whitelist, signatures (save, validate, toggle), config, settings, tokens
    for spec in routes:
        path = re.sub(r"<[^>]+>", "x", spec.path)
        for raw, expected in HOSTILE_BODIES:
            status, body = rest.call(spec.method, path, raw=raw)
            assert status == expected, (spec.method, path, raw[:20], body)
            assert set(body) >= {"error"}, body
    after = {path: rest.get(path)[1] for path in before}
    for state in (before["/api/v1/signatures"], after["/api/v1/signatures"]):
        state.pop("last_reload_at")
    assert after == before
    assert rest.get("/api/status")[0] == 200
