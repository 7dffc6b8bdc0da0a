"""Every attack scenario is detected with the right category through the real gRPC path; office
traffic from 20 agents over 30 minutes of event time raises nothing."""

from __future__ import annotations

import pytest

from tests.appliance.detection import scenarios as sc
from tests.appliance.detection.conftest import alerts_of

CASES = [
    ("iodine_tunnel", {}, "DnsTunneling", "tunnel-example.net"),
    ("dnscat2_tunnel", {}, "DnsTunneling", "c2-example.org"),
    ("dga_malware", {}, "DomainGeneration", sc.RESOLVER),
    ("dns_flood", {}, "DnsFlood", sc.RESOLVER),
    ("raw_ip_tls", {}, "RawIpTls", "185.220.101.47"),
    ("icmp_tunnel", {"kind": "ptunnel"}, "IcmpCovertChannel", "203.0.113.66"),
    ("icmp_tunnel", {"kind": "icmpsh"}, "IcmpCovertChannel", "203.0.113.66"),
    ("http_exfiltration", {}, "HttpExfiltration", None),
    ("http_covert", {}, "HttpCovertChannel", None),
    ("beaconing", {}, "Beaconing", None),
]


@pytest.mark.parametrize(("builder", "kwargs", "category", "indicator"), CASES,
                         ids=[c[0] + (f"-{c[1]['kind']}" if c[1] else "") for c in CASES])
def test_scenario_raises_one_alert_of_its_category(detecting, builder, kwargs, category, indicator):
    stream = getattr(sc, builder)(**kwargs)
    assert sc.stream(detecting.stub(), stream) == len(stream.packets)
    alerts = alerts_of(detecting)
    assert [a["category"] for a in alerts] == [category], [a["summary"] for a in alerts]
    alert = alerts[0]
    assert alert["confidence"] >= 0.6 and alert["status"] == "New"
    assert len(alert["detections"]) >= 2
    if indicator is not None:
        assert alert["indicator"] == indicator
    assert alert["agent_id"] in alert["summary"] and alert["indicator"] in alert["summary"]


def test_scenarios_from_several_agents_are_told_apart(detecting):
    stub = detecting.stub()
    for stream in (sc.iodine_tunnel(), sc.dga_malware(), sc.raw_ip_tls(), sc.http_exfiltration()):
        sc.stream(stub, stream)
    categories = sorted(a["category"] for a in alerts_of(detecting))
    assert categories == ["DnsTunneling", "DomainGeneration", "HttpExfiltration", "RawIpTls"]


def test_beacon_alert_shows_sub_scores_and_tolerates_a_missed_beat(detecting):
    sc.stream(detecting.stub(), sc.beaconing())
    (alert,) = alerts_of(detecting)
    evidence = alert["detections"][-1]["evidence"]
    for key in ("interval_cv", "mad_over_median", "bowley_skew", "size_score", "connections", "missed_beats"):
        assert key in evidence
    assert evidence["missed_beats"] >= 1
    assert evidence["interval_cv"] < 0.15
    assert 55 <= evidence["interval_median_s"] <= 65


@pytest.mark.slow
def test_thirty_minutes_of_office_traffic_from_twenty_agents_raises_no_alert(detecting):
    streams = [sc.benign_office(n, minutes=32) for n in range(20)]
    first = min(p.timestamp for s in streams for p in s.packets)
    last = max(p.timestamp for s in streams for p in s.packets)
    assert last - first >= 30 * 60_000
    sent = sc.stream_together(detecting, streams)
    assert sent == sum(len(s.packets) for s in streams)
    assert alerts_of(detecting) == []
    status, metrics = detecting.rest.get("/api/v1/metrics")
    assert metrics["flows_processed"] > 3000 and metrics["analysis_errors"] == 0
    assert metrics["active_alerts"] == 0 and sent > 50_000


def test_volume_spike_after_a_baseline_is_a_volume_anomaly(detecting):
    sc.stream(detecting.stub(), sc.volume_spike())
    (alert,) = alerts_of(detecting)
    assert alert["category"] == "VolumeAnomaly" and alert["indicator"] == "198.51.100.20"
    volume = next(d for d in alert["detections"] if d["detector"] == "behaviour.volume")
    assert volume["evidence"]["z_score"] > 3 and volume["evidence"]["baseline_buckets"] >= 20


def test_a_beacon_among_office_traffic_is_still_found_while_the_shared_push_service_is_not(detecting):
    streams = [sc.benign_office(n, minutes=20) for n in range(8)] + [sc.beaconing()]  # 6 of 8 use the push service
    sc.stream_together(detecting, streams)
    alerts = alerts_of(detecting)
    assert [(a["category"], a["indicator"]) for a in alerts] == [("Beaconing", sc.address_of("telemetry.beacon-example.com"))]
