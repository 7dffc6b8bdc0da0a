"""Exclusions (whitelist) and the analysis config over REST, applied to the next flows and persisted."""

from __future__ import annotations

from tests.appliance.detection import scenarios as sc
from tests.appliance.detection.conftest import alerts_of, start_detecting


def test_whitelist_crud_and_validation(detecting):
    rest = detecting.rest
    status, body = rest.post("/api/v1/whitelist", {"value": "Example.COM.", "protocol": "dns", "comment": "corp"})
    assert status == 201 and body["value"] == "example.com" and body["kind"] == "domain" and body["protocol"] == "dns"
    assert rest.post("/api/v1/whitelist", {"value": "10.0.0.0/8"})[1]["kind"] == "cidr"
    assert rest.post("/api/v1/whitelist", {"value": "not a value!"})[0] == 422
    status, body = rest.post("/api/v1/whitelist", {"value": "1.2.3.4", "protocol": "smtp"})
    assert status == 422 and body["field"] == "protocol"
    status, body = rest.get("/api/v1/whitelist")
    assert body["count"] == 2
    entry = body["entries"][0]
    assert rest.call("DELETE", f"/api/v1/whitelist/{entry['id']}")[0] == 200
    assert rest.call("DELETE", f"/api/v1/whitelist/{entry['id']}")[0] == 404
    assert rest.get("/api/v1/whitelist")[1]["count"] == 1


def test_domain_entry_covers_subdomains_and_applies_at_once(detecting):
    assert detecting.rest.post("/api/v1/whitelist", {"value": "tunnel-example.net", "protocol": "dns"})[0] == 201
    sc.stream(detecting.stub(), sc.iodine_tunnel())  # queries go to p....t.tunnel-example.net
    assert alerts_of(detecting) == []
    assert detecting.rest.get("/api/v1/metrics")[1]["detections_suppressed"] > 0


def test_dns_scoped_entry_does_not_suppress_tls_toward_the_same_address(detecting):
    rest = detecting.rest
    rest.post("/api/v1/whitelist", {"value": "185.220.101.47", "protocol": "dns"})
    sc.stream(detecting.stub(), sc.raw_ip_tls())
    assert [a["category"] for a in alerts_of(detecting)] == ["RawIpTls"]


def test_tcp_scope_covers_tls_and_agent_scope_limits_an_entry(detecting):
    stream = sc.raw_ip_tls()
    other = sc.raw_ip_tls()
    other.machine_id, other.ip = "second-host", "10.0.1.200"
    stub = detecting.stub()
    sc.stream(stub, stream)
    first_agent = alerts_of(detecting)[0]["agent_id"]
    detecting.rest.call("DELETE", f"/api/v1/alerts/{alerts_of(detecting)[0]['id']}")
    detecting.rest.post("/api/v1/whitelist", {"value": "185.220.101.0/24", "protocol": "tcp", "agent_id": first_agent})
    sc.stream(stub, sc.raw_ip_tls(sc.T0_MS + 3_600_000))
    sc.stream(stub, other)
    alerts = alerts_of(detecting)
    assert len(alerts) == 1 and alerts[0]["agent_id"] != first_agent


def test_config_get_post_validation_and_effect(detecting):
    rest = detecting.rest
    status, config = rest.get("/api/v1/config")
    assert status == 200
    for section in ("dns_tunneling", "dga", "dns_flood", "tls", "icmp", "http", "beaconing", "volume", "correlation"):
        assert section in config
    assert config["correlation"]["min_confidence"] == 0.6 and config["beaconing"]["max_cv"] == 0.15
    status, body = rest.post("/api/v1/config", {**config, "correlation": {**config["correlation"], "min_confidence": 7}})
    assert status == 422 and body["field"] == "correlation.min_confidence"
    status, body = rest.post("/api/v1/config", {**config, "bogus": {}})
    assert status == 422 and body["field"] == "bogus"
    # Raise the tunneling bar out of reach: the next flows no longer raise tunneling.
    strict = {**config, "dns_tunneling": {**config["dns_tunneling"], "min_queries": 100000},
              "correlation": {**config["correlation"], "min_detections": 50}}
    status, body = rest.post("/api/v1/config", strict)
    assert status == 200 and body["dns_tunneling"]["min_queries"] == 100000
    sc.stream(detecting.stub(), sc.iodine_tunnel())
    assert alerts_of(detecting) == []


def test_config_and_exclusions_survive_a_restart(tmp_path, monkeypatch):
    monkeypatch.delenv("SENSOR_ADMIN_TOKEN", raising=False)
    running = start_detecting(tmp_path)
    config = running.rest.get("/api/v1/config")[1]
    config["dga"]["min_suspicious_domains"] = 25
    assert running.rest.post("/api/v1/config", config)[0] == 200
    running.rest.post("/api/v1/whitelist", {"value": "example.org", "protocol": "any", "comment": "kept"})
    running.app.stop()
    running = start_detecting(tmp_path)
    try:
        assert running.rest.get("/api/v1/config")[1]["dga"]["min_suspicious_domains"] == 25
        (entry,) = running.rest.get("/api/v1/whitelist")[1]["entries"]
        assert entry["value"] == "example.org" and entry["comment"] == "kept"
    finally:
        running.app.stop()
