"""The /api/v1 proxy: roles, CSRF, the admin token kept server-side, who-triaged recorded, restarts survived."""

from __future__ import annotations

import time

from appliance.detection.alerts import Alert
from appliance.model import Severity


def _alert(console, indicator: str = "evil.example", status: str = "New") -> Alert:
    now = time.time_ns()
    alert = Alert(id=Alert.new_id(), agent_id="agent-1", indicator=indicator, category="DnsTunneling",
                  severity=int(Severity.HIGH), confidence=0.9, summary=f"tunnel via {indicator}", first_ns=now, last_ns=now,
                  status=status)
    console.appliance.app.detection.alerts.save("opened", alert)
    return alert


def test_reads_are_proxied_with_the_appliances_reply(console):
    admin = console.admin()
    status, body = admin.get("/api/v1/metrics")
    assert status == 200 and isinstance(body["packets_received"], int) and "packetsPerSecond" in body
    direct = console.appliance.rest.get("/api/v1/agents")
    assert admin.get("/api/v1/agents") == direct
    assert admin.get("/api/v1/alerts?limit=abc")[0] == 422
    assert admin.get("/api/v1/nothing-here") == (404, {"error": "Not found"})


def test_the_admin_token_never_reaches_the_browser(console):
    admin = console.admin()
    token = console.appliance.app.admin_token
    for path in ("/", "/auth/me", "/api/v1/metrics", "/api/v1/openapi.json", "/api/v1/settings"):
        status, body = admin.get(path)
        text = body if isinstance(body, bytes) else str(body)
        assert token not in str(text) and token not in str(admin.last_headers), path


def test_mutations_need_the_csrf_token(console):
    admin = console.admin()
    alert = _alert(console)
    for headers in ({}, {"X-CSRF-Token": "wrong"}, {"X-CSRF-Token": admin.csrf + "x"}):
        status, body = admin.request("POST", f"/api/v1/alerts/{alert.id}/status", {"status": "Acknowledged"},
                                     csrf=False, headers=headers)
        assert (status, body["code"]) == (403, "csrf")
    assert console.appliance.app.detection.alerts.get(alert.id).status == "New"
    status, body = admin.post(f"/api/v1/alerts/{alert.id}/status", {"status": "Acknowledged", "note": "looked"})
    assert status == 200 and body["status"] == "Acknowledged"


def test_triage_through_the_console_records_the_console_user_and_note(console):
    alert = _alert(console)
    ana = console.analyst("ana")
    assert ana.post(f"/api/v1/alerts/{alert.id}/status", {"status": "Investigating", "note": "escalating"})[0] == 200
    status, detail = ana.get(f"/api/v1/alerts/{alert.id}")
    assert status == 200
    assert [(h["actor"], h["from"], h["to"], h["note"]) for h in detail["history"]] == [
        ("ana", "New", "Investigating", "escalating")]
    # the browser cannot claim to be someone else: the dashboard sets the header itself
    ana.post(f"/api/v1/alerts/{alert.id}/status", {"status": "Acknowledged"}, headers={"X-Console-User": "admin"})
    assert console.appliance.rest.get(f"/api/v1/alerts/{alert.id}")[1]["history"][-1]["actor"] == "ana"


def test_analyst_may_triage_and_exclude_but_nothing_else(console):
    alert = _alert(console)
    ana = console.analyst()
    assert ana.get("/api/v1/alerts")[0] == 200
    assert ana.get("/api/v1/signatures")[0] == 200
    assert ana.post("/api/v1/alerts/bulk", {"filter": {"indicator": "evil.example"}, "status": "Acknowledged"})[0] == 200
    status, entry = ana.post("/api/v1/whitelist", {"value": "good.example"})
    assert status == 201
    assert ana.request("DELETE", f"/api/v1/whitelist/{entry['id']}")[0] == 200
    refused = [("POST", "/api/v1/agent/tokens", {}), ("GET", "/api/v1/agent/tokens", None),
               ("POST", "/api/v1/signatures/reload", {}), ("POST", "/api/v1/config", {}),
               ("PUT", "/api/v1/settings", {"general": {"darkMode": False}}), ("DELETE", f"/api/v1/alerts/{alert.id}", None),
               ("POST", "/api/v1/agents/a/revoke", {}), ("POST", "/api/v1/signatures", {}),
               ("POST", "/api/v1/alerts/bulk/../../signatures/reload", {})]
    for method, path, body in refused:
        status, reply = ana.request(method, path, body)
        assert status in (400, 403), (method, path, status)
        if status == 403:
            assert reply["code"] == "forbidden" and reply["error"].startswith("your role (analyst) cannot"), path
    assert console.appliance.app.detection.alerts.get(alert.id) is not None
    assert console.appliance.rest.get("/api/v1/settings")[1]["general"]["darkMode"] is True


def test_encoded_dot_segments_and_odd_paths_are_refused_before_the_role_check(console):
    ana = console.analyst()
    for path in ("/api/v1/alerts/%2e%2e/agent/tokens", "/api/v1/alerts/..%2fagent%2ftokens", "/api/v1//agent/tokens",
                 "/api/v1/./agent/tokens", "/api/v1/alerts/%00"):
        status, body = ana.get(path)
        assert status in (400, 403, 404), path
        assert "token" not in str(body).lower() or body.get("code") in ("bad_path", "forbidden"), path


def test_the_console_keeps_working_when_the_appliance_is_down(console):
    admin = console.admin()
    upstream = console.dashboard.upstream
    real = upstream.base_url
    upstream.base_url = "https://localhost:1"  # nothing listens there: the appliance "restarting"
    status, body = admin.get("/api/v1/metrics")
    assert (status, body["code"]) == (502, "upstream_unavailable")
    assert admin.get("/auth/me")[0] == 200
    upstream.base_url = real
    assert admin.get("/api/v1/metrics")[0] == 200
