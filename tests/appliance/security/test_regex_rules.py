"""Item 3: a backtracking regex rule, then monitored traffic made to trigger the backtracking.

With a backtracking engine one DNS query for `a…a!.com` against `^(a+)+$` took seconds, doubling
per character, on the analysis thread. Rule regexes are RE2 now: linear in the text.
"""

from __future__ import annotations

import time

from tests.appliance import wire
from tests.appliance.security.conftest import status_probe


def _rule(rule_id: str, pattern: str) -> dict:
    return {"id": rule_id, "title": "Hostile pattern", "description": "A rule an attacker would like.",
            "protocol": "dns", "category": "DnsTunneling", "severity": "Low", "confidence": 0.3,
            "conditions": [{"field": "dns.qname", "op": "regex", "value": pattern}]}


def test_a_catastrophic_pattern_matches_in_linear_time_on_hostile_traffic(appliance):
    status, body = appliance.rest.post("/api/v1/signatures", _rule("SIG-REDOS", "^(a+)+$"))
    assert status == 200, body
    name = "a" * 60 + "!.com"  # 2^60 steps for a backtracking engine
    now_ms = int(time.time() * 1000)
    before = appliance.rest.get("/api/v1/metrics")[1]["flows_processed"]
    with status_probe(appliance):
        stub = appliance.stub()
        packets = [wire.udp_out("10.0.0.5", "10.0.0.53", 50000 + i, 53, wire.dns_query(name, ident=i), now_ms + i)
                   for i in range(20)]
        reply = stub.StreamPackets(iter(packets), metadata=[("x-machine-id", "redos")], timeout=30)
        assert reply.packets_received == 20
        assert appliance.app.pipeline.drain(10)  # the stream's end flushed the 20 flows into analysis
    metrics = appliance.rest.get("/api/v1/metrics")[1]
    assert metrics["flows_processed"] - before == 20 and metrics["analysis_errors"] == 0
    # The hostile name really reached the rule: it is the query of the analysed flows.
    flows = appliance.rest.get(f"/api/v1/flows?agent_id={reply.agent_id}&limit=100")[1]["flows"]
    assert len(flows) == 20 and all(f["dns_queries"] == [name] for f in flows)


def test_patterns_re2_cannot_run_in_linear_time_are_refused_with_422(appliance):
    for pattern in (r"(a)\1", r"foo(?=bar)", r"(?<!x)y"):
        status, body = appliance.rest.post("/api/v1/signatures/validate", _rule("SIG-BACKREF", pattern))
        assert status == 422, (pattern, body)
        assert body["field"] == "conditions[0].value" and "RE2" in body["error"], body
    assert appliance.rest.get("/api/v1/signatures")[1]["loaded"] == 0  # nothing was written


def test_overlong_patterns_are_refused(appliance):
    status, body = appliance.rest.post("/api/v1/signatures", _rule("SIG-LONG", "a" * 1025))
    assert status == 422 and "longer than 1024" in body["error"], body
    assert appliance.rest.post("/api/v1/signatures/validate", _rule("SIG-OK", "a" * 1024))[0] == 200
