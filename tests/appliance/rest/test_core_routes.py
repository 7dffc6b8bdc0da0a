"""The REST API over real HTTPS: auth, error shapes, metrics history, flows, OpenAPI."""

import re

import pytest

from appliance.generated import sensor_pb2
from tests.appliance import wire
from tests.polling import wait_for

BASE_MS = 1_700_000_000_000


def concrete(path: str) -> str:
    return re.sub(r"<[^>]+>", "x", path)


def test_every_protected_route_requires_the_admin_token(appliance):
    protected = [r for r in appliance.app.api.routes if not r.public and r.auth == "admin"]
    assert len(protected) >= 6
    for route in protected:
        for token in (None, "wrong-token", appliance.rest.token + "x", ""):
            status, body = appliance.rest.call(route.method, concrete(route.path), token=token,
                                               raw=b"{}" if route.method != "GET" else None)
            assert (status, body) == (401, {"error": "Authentication required"}), (route.method, route.path, token)


def test_a_non_bearer_scheme_is_refused(appliance):
    status, _ = appliance.rest.get("/api/v1/metrics", token=None, headers={"Authorization": f"Basic {appliance.rest.token}"})
    assert status == 401


def test_unknown_route_is_json_404_and_wrong_method_json_405(appliance):
    assert appliance.rest.get("/api/v1/nothing-here") == (404, {"error": "Not found"})
    status, body = appliance.rest.call("DELETE", "/api/status")
    assert status == 405 and body == {"error": "Method not allowed"}


def test_bad_query_values_answer_422_naming_the_field(appliance):
    status, body = appliance.rest.get("/api/v1/flows?limit=abc")
    assert status == 422 and body["field"] == "limit" and "limit" in body["error"]
    status, body = appliance.rest.get("/api/v1/flows?limit=100000")
    assert status == 422 and body["field"] == "limit"
    status, body = appliance.rest.get("/api/v1/flows?state=sideways")
    assert status == 422 and body["field"] == "state"


def test_unknown_flow_and_agent_are_404_json(appliance):
    assert appliance.rest.get("/api/v1/flows/0123abc")[0] == 404
    status, body = appliance.rest.get("/api/v1/agents/" + "%2e%2e%2f" * 10)
    assert status == 404 and "error" in body


def test_metrics_report_the_documented_counters(appliance):
    status, body = appliance.rest.get("/api/v1/metrics")
    assert status == 200
    for key in ("packets_received", "active_flows", "flows_processed", "detections_generated", "alerts_generated",
                "active_alerts", "signature_rules", "flows_evicted", "analysis_queue_dropped", "packets_rejected"):
        assert isinstance(body[key], int), key


def test_history_ring_keeps_the_last_120_snapshots(appliance):
    history = appliance.app.history
    for _ in range(150):
        history.take()
    status, body = appliance.rest.get("/api/v1/metrics/history")
    assert status == 200 and body["count"] == 120 and len(body["entries"]) == 120
    stamps = [e["timestamp"] for e in body["entries"]]
    assert stamps == sorted(stamps)


def test_history_is_taken_on_its_period(appliance):
    # The fixture's period is 50 ms (the default is 5 s). Wait for three snapshots after a mark rather than
    # count them over a fixed sleep (a loaded machine delays the timer thread; the ring also stops at 120),
    # then hold their spacing, on the appliance's own clock, to the short period: the default would need 10 s.
    def stamps() -> list[float]:
        return [e["timestamp"] for e in appliance.rest.get("/api/v1/metrics/history")[1]["entries"]]

    mark = max(stamps(), default=0)
    new = wait_for(lambda: len(after := [t for t in stamps() if t > mark]) >= 3 and after, timeout=15)
    assert new, "fewer than three snapshots were taken in 15 s"
    assert new[2] - new[0] < 5.0, new


def test_flows_filter_by_agent_and_limit_and_detail(appliance):
    stub = appliance.stub()
    for machine, count in (("m-a", 5), ("m-b", 2)):
        pkts = [wire.packet(ts_ms=BASE_MS + i, remote=f"3.3.3.{i + 1}") for i in range(count)]
        release = None
        stub.StreamPacketBatches(iter([sensor_pb2.PacketBatch(packets=pkts)]), metadata=[("x-machine-id", machine)])
    assert appliance.app.pipeline.drain()
    agents = {a["id"] for a in appliance.rest.get("/api/v1/agents")[1]["agents"]}
    assert len(agents) == 2
    all_flows = appliance.rest.get("/api/v1/flows")[1]
    assert all_flows["count"] == 7
    some = appliance.rest.get("/api/v1/flows?limit=3")[1]
    assert some["count"] == 3
    for agent in agents:
        body = appliance.rest.get(f"/api/v1/flows?agent_id={agent}")[1]
        assert {f["agent_id"] for f in body["flows"]} == {agent}
    flow = all_flows["flows"][0]
    status, detail = appliance.rest.get(f"/api/v1/flows/{flow['id']}")
    assert status == 200 and detail["id"] == flow["id"] and detail["community_id"].startswith("1:")
    assert detail["local_ip"] == "10.0.0.5" and detail["remote_port"] == 443 and detail["transport"] == "tcp"


def test_openapi_document_lists_every_route(appliance):
    status, doc = appliance.rest.get("/api/v1/openapi.json")
    assert status == 200 and doc["openapi"] == "3.1.0"
    for route in appliance.app.api.routes:
        path = re.sub(r"<([^>:]+)(:[^>]*)?>", r"{\1}", route.path)
        assert route.method.lower() in doc["paths"][path], path
    assert "security" not in doc["paths"]["/api/status"]["get"]
    assert doc["paths"]["/api/v1/metrics"]["get"]["security"] == [{"adminToken": []}]


@pytest.mark.parametrize("raw", [b"\x00" * 10, b"{" * 5000, "é".encode("latin-1")])
def test_hostile_requests_never_get_html_or_tracebacks(appliance, raw):
    status, body = appliance.rest.call("POST", "/api/v1/config", raw=raw)
    assert (status, body) == (400, {"error": "Request body is not valid JSON"})
    assert appliance.rest.get("/api/status", token=None)[0] == 200


def test_admin_token_file_is_private(appliance):
    path = appliance.app.settings.paths.state_dir / "admin.token"
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.read_text().strip() == appliance.app.admin_token


def test_environment_token_wins(tmp_path, monkeypatch):
    from tests.conftest import start_appliance
    monkeypatch.setenv("SENSOR_ADMIN_TOKEN", "from-the-environment-0123456789")
    running = start_appliance(tmp_path)
    try:
        assert running.rest.get("/api/v1/metrics", token="from-the-environment-0123456789")[0] == 200
        assert not (tmp_path / "state" / "admin.token").exists()
    finally:
        running.app.stop()


@pytest.mark.parametrize("raw", [b'{"x": 1e999}', b'{"x": NaN}', b'{"x": Infinity}', b"[" * 100000])
def test_bodies_that_are_not_finite_json_are_400(appliance, raw):
    status, body = appliance.rest.call("POST", "/api/v1/config", raw=raw)
    assert status == 400 and body == {"error": "Request body is not valid JSON"}


def test_a_non_utf8_authorization_header_is_a_401_not_a_500(appliance):
    import http.client
    import ssl
    ctx = ssl.create_default_context(cafile=str(appliance.app.ca.ca_cert_path))
    conn = http.client.HTTPSConnection("localhost", appliance.app.rest_port, context=ctx, timeout=10)
    conn.putrequest("GET", "/api/v1/metrics")
    conn.putheader("Authorization", b"Bearer \xe9\xff")
    conn.endheaders()
    reply = conn.getresponse()
    assert reply.status == 401 and reply.read() == b'{"error": "Authentication required"}'
