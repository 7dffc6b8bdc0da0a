"""The resolver cache behind RawIpTls: fed by DNS answers in packets and by StreamDnsEvents."""

from __future__ import annotations

from appliance.generated import sensor_pb2
from tests.appliance.detection import scenarios as sc
from tests.appliance.detection.conftest import alerts_of

SERVER = "45.77.12.34"
NAME = "portal.partner-example.com"


def _sessions(stream: sc.Stream, sni: str = NAME) -> None:
    for i in range(3):
        stream.tls(sc.T0_MS + 5_000 + i * 40_000, SERVER, sni)


def _dns_event(ts_ms: int) -> sensor_pb2.DnsEvent:
    return sensor_pb2.DnsEvent(timestamp=ts_ms, pid=4242, process_name="chrome.exe", query=NAME, query_type=1,
                               rcode=0, answers=[sensor_pb2.DnsAnswer(name=NAME, type=1, ttl=60, data=SERVER)])


def test_a_resolver_event_makes_the_address_known(detecting):
    stub = detecting.stub()
    stream = sc.Stream("event-host", "10.0.1.60")
    reply = stub.StreamDnsEvents(iter([_dns_event(sc.T0_MS)]), metadata=[("x-machine-id", stream.machine_id)])
    assert reply.packets_received == 1
    _sessions(stream)
    sc.stream(stub, stream)
    assert alerts_of(detecting) == []
    assert detecting.rest.get("/api/v1/metrics")[1]["detections_generated"] == 0


def test_the_same_sessions_without_any_resolution_are_raw_ip_tls(detecting):
    stream = sc.Stream("event-host", "10.0.1.60")
    _sessions(stream)
    sc.stream(detecting.stub(), stream)
    (alert,) = alerts_of(detecting)
    assert alert["category"] == "RawIpTls" and alert["indicator"] == SERVER


def test_a_resolution_by_another_agent_does_not_count(detecting):
    stub = detecting.stub()
    stub.StreamDnsEvents(iter([_dns_event(sc.T0_MS)]), metadata=[("x-machine-id", "some-other-host")])
    stream = sc.Stream("event-host", "10.0.1.60")
    _sessions(stream)
    sc.stream(stub, stream)
    assert [a["category"] for a in alerts_of(detecting)] == ["RawIpTls"]


def test_sni_that_no_lookup_backs_is_evidence(detecting):
    stream = sc.Stream("fronting-host", "10.0.1.61")
    stream.dns(sc.T0_MS, NAME, answers=[SERVER])
    _sessions(stream, sni="unrelated-service.example.net")
    sc.stream(detecting.stub(), stream)
    (alert,) = alerts_of(detecting)
    assert alert["category"] == "RawIpTls"
    assert {d["detector"] for d in alert["detections"]} == {"dpi.tls.sni_mismatch"}
    assert alert["detections"][0]["evidence"]["resolved_as"] == NAME


def test_private_addresses_are_not_judged(detecting):
    stream = sc.Stream("lan-host", "10.0.1.62")
    for i in range(3):
        stream.tls(sc.T0_MS + i * 30_000, "10.0.5.20", "")  # a NAS by address
    sc.stream(detecting.stub(), stream)
    assert detecting.rest.get("/api/v1/metrics")[1]["detections_generated"] == 1  # only the no-SNI rule, once per interval
    assert alerts_of(detecting) == []


def test_a_name_resolved_every_minute_stays_known_for_analysis_an_hour_behind():
    from appliance.detection.resolutions import ResolverCache
    from appliance.model import DnsAnswer, DnsMessage

    cache = ResolverCache()
    minute = 60 * 10**9
    for m in range(120):  # ingestion runs ahead: two hours of answers are in before the flows are judged
        cache.observe("agent", DnsMessage(1, True, 0, NAME, 1, 1, [DnsAnswer(NAME, 1, 60, SERVER)], timestamp_ns=m * minute))
    for m in (0, 5, 30, 61, 119):
        assert cache.lookup("agent", SERVER, m * minute + 20 * 10**6, 3600) is not None, m
    assert cache.lookup("agent", SERVER, -5 * minute, 3600) is None  # before the first answer: unknown
    assert len(cache._by_ip["agent"][SERVER].times) <= 64
