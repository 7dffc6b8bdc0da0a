"""DNS entries on a partition reach an analyzer's resolver cache: a batch of answers read in place, a batch
holding a resolver event as objects (the DNS layers see the event too), each in the order the entries came."""

from __future__ import annotations

from pathlib import Path

from appliance.cluster import bus
from appliance.flows import record_codec
from appliance.model import DnsAnswer, DnsMessage
from tests.appliance.cluster.conftest import RedisServer, lone_analyzer, pending
from tests.appliance.cluster.test_checkpoint import AGENT, flow
from tests.polling import wait_for

PARTITIONS = 2
NS = 1_000_000_000


def answer(name: str, address: str, at_s: float) -> DnsMessage:
    return DnsMessage(7, True, 0, name, 1, 1, [DnsAnswer(name, 1, 300, address)], timestamp_ns=int(at_s * NS))


def test_dns_answers_and_resolver_events_teach_the_analyzers_cache(tmp_path: Path, redis_server: RedisServer) -> None:
    analyzer, client = lone_analyzer(tmp_path, redis_server, PARTITIONS)
    stream = bus.flows_key(0)
    answers_only = record_codec.encode_dns([(AGENT, answer("cdn.example.com", "198.51.100.7", 10.0), False)])
    with_event = record_codec.encode_dns([(AGENT, answer("mail.example.org", "198.51.100.8", 11.0), True),
                                          (AGENT, answer("api.example.net", "198.51.100.9", 12.0), False)])
    for data in (answers_only, with_event):
        client.xadd(stream, {"k": bus.KIND_DNS, "d": data, "n": 0})
    client.xadd(stream, {"k": bus.KIND_FLOWS, "d": record_codec.encode([flow(1, 20.0, 0xC6336407, 443, 100)]), "n": 1})
    analyzer.start()
    try:
        assert wait_for(lambda: analyzer.flows_analysed == 1, timeout=30)
        assert wait_for(lambda: pending(client, PARTITIONS) == 0, timeout=10)
        resolver = analyzer.parts.resolver
        found = {ip: resolver.lookup(AGENT, ip, 20 * NS, 60.0) for ip in ("198.51.100.7", "198.51.100.8", "198.51.100.9")}
    finally:
        analyzer.stop()
    assert {ip: r.name if r else None for ip, r in found.items()} == {
        "198.51.100.7": "cdn.example.com", "198.51.100.8": "mail.example.org", "198.51.100.9": "api.example.net"}
    assert analyzer.entries_refused == 0
