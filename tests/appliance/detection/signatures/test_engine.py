"""SignatureEngine's lazy matching (matcher.py) against the reference (every record built, every field read):
the same detections (rule, first matching record, evidence, domain, throttle keys) on the scenario corpus,
on random rule sets over random flows, and across hot reloads mid-stream."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from appliance.detection.analysis_config import AnalysisConfig, DetectorConfig
from appliance.detection.analysis_config_holder import AnalysisConfigHolder
from appliance.detection.domains import RegisteredDomains
from appliance.detection.dpi.http_parse import HttpRequest
from appliance.detection.dpi.tls_cert import CertificateInfo
from appliance.detection.dpi.tls_lists import fingerprint_lists
from appliance.detection.dpi.tls_meta import TlsMetadata
from appliance.detection.dpi.tls_parse import ClientHello
from appliance.detection.facts import Facts, FlowFacts
from appliance.detection.signatures.engine import RuleSet, SignatureEngine
from appliance.detection.signatures.fields import FIELDS, PROTOCOLS, QTYPES, RCODES
from appliance.detection.signatures.operators import OPERATORS
from appliance.detection.signatures.rules import Rule, parse_rule
from appliance.model import Detection, DnsMessage, FlowRecord, IcmpInfo, Packet, Transport
from tests.appliance.detection.conftest import RULES
from tests.appliance.detection.signatures.reference import ReferenceEngine


class GivenFacts:
    """The payload facts of the random flows, built by the test (the corpus test parses real payloads)."""

    def __init__(self) -> None:
        self.by_flow: dict[str, Facts] = {}

    def facts(self, flow: FlowRecord) -> Facts:
        return self.by_flow.get(flow.flow_id) or Facts()


def engines(directory: Path, facts: Any = None, report_interval_s: float = 1e-9) -> tuple[SignatureEngine, ReferenceEngine]:
    """The engine and the reference over one rules directory, each with its own facts cache and throttle
    (an interval of 1 ns lets every hit through the throttle but one of the same key at the same instant)."""
    config = AnalysisConfigHolder(AnalysisConfig(detectors=DetectorConfig(report_interval_s=report_interval_s)))
    return (SignatureEngine(directory, config, facts or FlowFacts(tls_views=False), RegisteredDomains()),
            ReferenceEngine(directory, config, facts or FlowFacts(tls_views=False), RegisteredDomains()))


def shown(detections: list[Detection]) -> list[tuple[Any, ...]]:
    """What a detection says, all but its random id."""
    return [(d.detector, d.category, d.confidence, d.severity, d.agent_id, d.indicator, d.evidence, d.flow_ids,
             d.first_ns, d.last_ns) for d in detections]


def same_detections(engine: SignatureEngine, reference: SignatureEngine, flows: list[FlowRecord]) -> list[tuple[Any, ...]]:
    found: list[tuple[Any, ...]] = []
    for flow in flows:
        fast, slow = shown(engine.analyze(flow)), shown(reference.analyze(flow))
        assert fast == slow, flow
        found += fast
    return found


def test_the_shipped_rules_find_the_same_on_the_scenario_corpus(tmp_path: Path):
    """Every flow of the bench corpus (20 office agents and every attack scenario), payloads parsed for real,
    the shipped rules, the throttle as configured by default."""
    from bench.pipeline_bench import corpus, finished_flows

    flows = finished_flows(corpus())
    engine, reference = engines(RULES, report_interval_s=DetectorConfig().report_interval_s)
    assert not engine.reload() and not reference.reload()
    found = same_detections(engine, reference, flows)
    rules = {d[0] for d in found}
    assert len(found) >= 50 and len(rules) >= 8, rules  # the corpus trips most shipped rules
    assert {d[6]["protocol"] for d in found} >= {"dns", "tls", "http"}


def test_the_loop_over_many_flows_finds_what_the_reference_finds_flow_by_flow(tmp_path: Path):
    """`analyze_many` (the pipeline's call, the plans' body in a loop) on the bench corpus 256 flows at a time; a flow
    the rules cannot read goes to `failed` and the loop goes on with the next."""
    from bench.pipeline_bench import corpus, finished_flows

    flows = finished_flows(corpus())
    broken = replace(next(f for f in flows if f.transport is Transport.TCP), bytes_out=None)  # type: ignore[arg-type]
    flows.insert(100, broken)
    engine, reference = engines(RULES, report_interval_s=DetectorConfig().report_interval_s)
    assert not engine.reload() and not reference.reload()
    failed: list[FlowRecord] = []
    found: dict[int, list[Detection]] = {}
    for start in range(0, len(flows), 256):
        found.update((start + i, d) for i, d in engine.analyze_many(flows[start:start + 256], failed.append))
    assert failed == [broken]
    want = {n: shown(d) for n, flow in enumerate(flows) if flow is not broken and (d := reference.analyze(flow))}
    assert {n: shown(d) for n, d in found.items()} == want
    assert len(want) >= 30
    with pytest.raises(TypeError):
        engine.analyze_many([broken])  # no `failed`: the caller's exception


# -- random rule sets over random flows --------------------------------------------------------
QNAMES = ["", "a.example.com", "dnscat.abc.net", "xkcdqwrtzplm.com", "mail.example.org", "aaaa" * 30 + ".net",
          "mgzxtbvq" * 6 + ".tunnel.io", "192.0.2.7"]
HOSTS = ["", "example.com", "203.0.113.9", "exfil-example.com", "Upper.Example.COM"]
URIS = ["/", "/gate.php?id=1", "/" + "QUJD" * 20, "/index.html", "/Upload", "/x?" + "a" * 400]  # too long to memoise
AGENTS = ["", "python-requests/2.31", "Mozilla/5.0", "curl/8.0", "Go-http-client/1.1"]
PROCESSES = ["", "python3", "Chrome.exe", "powershell.exe", "nc"]
ADDRESSES = [0xC0000207, 0xCB007109, 0x0A000001, 0x08080808]  # 192.0.2.7, 203.0.113.9, 10.0.0.1, 8.8.8.8
SUBJECTS = ["CN=localhost", "CN=example.com,O=Example", "O=Fortinet,CN=FGT"]
VERSIONS = ["TLSv1.3", "TLSv1.2", "TLSv1.0", "SSLv3"]
STR_VALUES: dict[str, list[str]] = {
    "transport": ["tcp", "udp", "icmp", "other"], "process_name": [p for p in PROCESSES if p] + ["POWERSHELL.EXE"],
    "dns.qname": [q for q in QNAMES if q], "dns.qtype": ["a", "TXT", "null", "aaaa", "99"],
    "dns.rcode": ["nxdomain", "NOERROR", "servfail", "9"], "tls.sni": [q for q in QNAMES if q],
    "tls.version": VERSIONS, "tls.ja4": ["t13d1516h2_8daaf6152771_e5627efa2ab1"], "tls.ja4s": ["t130200_1301_234ea6891581"],
    "tls.ja3": ["72a589da586844d7f0818ce684948eea"], "tls.alpn": ["h2", "http/1.1"],
    "tls.cert.subject": [s.lower() for s in SUBJECTS], "tls.cert.issuer": [s.lower() for s in SUBJECTS],
    "http.method": ["get", "POST", "put"], "http.host": [h for h in HOSTS if h], "http.uri": [u for u in URIS if u],
    "http.user_agent": [a for a in AGENTS if a],
}
INT_VALUES: dict[str, list[int]] = {
    "remote_port": [53, 443, 4444, 8080], "bytes_out": [0, 500, 10_000, 60_000_000], "bytes_in": [0, 999, 5000],
    "duration_s": [0, 5, 4000], "dns.qname_length": [0, 12, 100, 130], "tls.cert.self_signed": [0, 1],
    "tls.cert.validity_days": [0, 90, 825, 3650], "tls.cert.key_bits": [0, 1024, 2048, 4096],
    "http.content_length": [0, 1000, 2_000_000], "icmp.type": [0, 8, 3], "icmp.payload_size": [0, 56, 1500],
}
IPS = ["192.0.2.7", "203.0.113.9", "10.0.0.1"]


def random_value(rng: random.Random, name: str) -> Any:
    kind = FIELDS[name].kind
    if kind == "ip":
        return rng.choice(IPS)
    if kind == "int":
        return rng.choice(INT_VALUES[name])
    value = rng.choice(STR_VALUES[name])
    return value.upper() if rng.random() < 0.2 else value  # rule values compare case-insensitively


def random_condition(rng: random.Random, name: str, op: str) -> dict[str, Any]:
    kind = FIELDS[name].kind
    if op in ("in", "not_in"):
        value: Any = [random_value(rng, name) for _ in range(rng.randint(1, 3))]
    elif op in ("contains", "startswith", "endswith"):
        text = random_value(rng, name)
        cut = rng.randint(1, len(text))
        value = {"contains": text[rng.randint(0, cut - 1):cut], "startswith": text[:cut], "endswith": text[-cut:]}[op]
    elif op == "regex":
        value = rng.choice(["^[a-z]{3,}\\.", "\\d+\\.\\d+", "(^|\\.)dnscat\\.", "[a-z0-9+/=_-]{40,}", "example", "^$|x"])
    elif op == "cidr":
        value = rng.choice(["192.0.2.0/24", "10.0.0.0/8", "203.0.113.9/32", "2001:db8::/32"])
    elif op in ("gt", "lt"):
        value = rng.choice(INT_VALUES[name]) + rng.choice([-1, 0, 1])
    elif op == "exists":
        value = rng.random() < 0.5
    elif op == "in_list":
        value = rng.choice(sorted(fingerprint_lists()))
    else:
        value = random_value(rng, name)
    assert kind in OPERATORS[op].kinds
    return {"field": name, "op": op, "value": value}


def random_rule(rng: random.Random, n: str, protocol: str) -> Rule:
    names = [name for name, spec in FIELDS.items() if protocol in spec.protocols]
    conditions = []
    for _ in range(rng.randint(1, 4)):
        # Half the time a field already used: several conditions on one field (one fetch, several tests).
        name = conditions[-1]["field"] if conditions and rng.random() < 0.5 else rng.choice(names)
        op = rng.choice([op.name for op in OPERATORS.values() if FIELDS[name].kind in op.kinds])
        conditions.append(random_condition(rng, name, op))
    rule, problems = parse_rule({"id": f"SIG-R-{n}", "title": "random", "description": "random rule", "protocol": protocol,
                                 "category": "DnsTunneling", "severity": "Low", "confidence": 0.5,
                                 "enabled": rng.random() > 0.1, "conditions": conditions}, f"r{n}.yaml")
    assert rule is not None, problems
    return rule


def random_flow(rng: random.Random, n: int, given: GivenFacts) -> FlowRecord:
    transport = rng.choice([Transport.TCP, Transport.TCP, Transport.UDP, Transport.ICMP, Transport.OTHER])
    first = rng.randint(0, 10**12)
    flow = FlowRecord(f"flow{n}", rng.choice(["agent-a", "agent-b"]), int(transport), transport, 0x0A0A0A0A, 40000,
                      rng.choice(ADDRESSES), rng.choice(INT_VALUES["remote_port"]), first,
                      first + rng.choice([0, 5, 4000]) * 10**9, bytes_out=rng.choice(INT_VALUES["bytes_out"]),
                      bytes_in=rng.choice(INT_VALUES["bytes_in"]), process_name=rng.choice(PROCESSES))
    if transport is not Transport.ICMP and rng.random() < 0.5:  # several messages: a later one may match
        flow.dns = [DnsMessage(rng.randint(0, 65535), rng.random() < 0.5, rng.choice([*RCODES, 9]), rng.choice(QNAMES),
                               rng.choice([*QTYPES, 99]), 1) for _ in range(rng.randint(1, 5))]
    if transport is Transport.ICMP:
        flow.samples = [Packet(first, rng.choice([1, 2]), 1, transport, 0x0A0A0A0A, flow.remote_ip, 0, 0, 100, b"",
                               icmp=IcmpInfo(rng.choice([0, 8, 3]), 0, bytes(rng.choice([0, 3, 60, 1504]))))
                        for _ in range(rng.randint(0, 3))]
    if transport is Transport.TCP:
        facts = Facts()
        if rng.random() < 0.6:  # else a flow with no TLS facts
            hello = ClientHello(rng.choice(VERSIONS), rng.choice(QNAMES), alpn=tuple(rng.sample([b"h2", b"http/1.1"], rng.randint(0, 2))))
            leafs = [CertificateInfo(rng.choice(SUBJECTS), rng.choice(SUBJECTS), [], [], "", 0.0,
                                     rng.choice([1, 90, 825, 3650]) * 86400.0 + rng.choice([0.0, 0.5]), rng.random() < 0.5,
                                     "rsa", rng.choice([0, 1024, 2048]), "", None)  # type: ignore[arg-type]
                     for _ in range(rng.randint(0, 2))]
            tls = TlsMetadata(hello if rng.random() < 0.9 else None, None, rng.choice(["", *STR_VALUES["tls.ja4"]]),
                              rng.choice(["", *STR_VALUES["tls.ja4s"]]), rng.choice(["", *STR_VALUES["tls.ja3"]]), leafs)
            facts.tls, facts.client_hello = tls, tls.client_hello
        facts.http_requests = [HttpRequest(rng.choice(["GET", "POST", "put"]), rng.choice(URIS), "HTTP/1.1", rng.choice(HOSTS),
                                           rng.choice(AGENTS), rng.choice(INT_VALUES["http.content_length"]))
                               for _ in range(rng.choice([0, 0, 1, 3]))]
        given.by_flow[flow.flow_id] = facts
    return flow


def test_random_rule_sets_over_random_flows_find_the_same(tmp_path: Path):
    """60 random rule sets (every protocol, field and operator; several conditions on one field; disabled
    rules) over random flows (several DNS messages, ICMP echoes, HTTP requests; TLS with and without facts)."""
    rng = random.Random(15)
    given = GivenFacts()
    flows = [random_flow(rng, n, given) for n in range(400)]
    engine, reference = engines(tmp_path, facts=given)
    protocols_hit: set[str] = set()
    operators: set[str] = set()
    fields: set[str] = set()
    later_record_hits = 0
    for round_ in range(60):
        rules = [random_rule(rng, f"{round_}-{n}", rng.choice(PROTOCOLS)) for n in range(rng.randint(1, 12))]
        engine.ruleset = reference.ruleset = RuleSet.of(rules)
        operators |= {c.op for r in rules for c in r.conditions}
        fields |= {c.field for r in rules for c in r.conditions}
        many: dict[int, list[Detection]] = {}
        if round_ % 2:  # every other set through the loop over many flows (the pipeline's), 100 at a time
            for start in range(0, len(flows), 100):
                many.update((start + i, found) for i, found in engine.analyze_many(flows[start:start + 100]))
        for n, flow in enumerate(flows):
            fast = shown(many.get(n, [])) if round_ % 2 else shown(engine.analyze(flow))
            slow = shown(reference.analyze(flow))
            assert fast == slow, (round_, flow.flow_id)
            protocols_hit |= {d[6]["protocol"] for d in fast}
            if flow.dns and any(d[6]["protocol"] == "dns" and d[6]["matched"].get("dns.qname", flow.dns[0].qname) != flow.dns[0].qname
                                for d in fast):
                later_record_hits += 1
    assert operators == set(OPERATORS) and fields == set(FIELDS)
    assert protocols_hit == set(PROTOCOLS)  # every protocol's rules matched somewhere: the comparison is not vacuous
    assert later_record_hits > 0  # a DNS rule reported a record after the flow's first


def _write(directory: Path, rules: list[dict[str, Any]]) -> None:
    for old in directory.glob("*.yaml"):
        old.unlink()
    for rule in rules:
        (directory / f"{rule['id']}.yaml").write_text(yaml.safe_dump(rule), encoding="utf-8")


def _rule(rule_id: str, protocol: str, conditions: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": rule_id, "title": rule_id, "description": "reload test", "protocol": protocol, "category": "DnsTunneling",
            "severity": "High", "confidence": 0.5, "conditions": conditions}


def test_hot_reload_mid_stream_swaps_the_whole_set_and_forgets_the_old_answers(tmp_path: Path):
    """The same names before and after a reload that changes what they match: the answers remembered for
    the old set (item and test memos) must not leak into the new one."""
    rng = random.Random(7)
    given = GivenFacts()
    flows = [random_flow(rng, n, given) for n in range(300)]
    first = [_rule("SIG-A-1", "dns", [{"field": "dns.qname", "op": "regex", "value": "example"}]),
             _rule("SIG-A-2", "tls", [{"field": "tls.sni", "op": "regex", "value": "\\d+\\.\\d+"}]),
             _rule("SIG-A-3", "tcp", [{"field": "remote_port", "op": "in", "value": [4444]}])]
    second = [_rule("SIG-A-1", "dns", [{"field": "dns.qname", "op": "regex", "value": "dnscat|tunnel"}]),
              _rule("SIG-B-2", "tls", [{"field": "tls.sni", "op": "regex", "value": "example"}]),
              _rule("SIG-B-3", "http", [{"field": "http.uri", "op": "contains", "value": "gate"}])]
    _write(tmp_path, first)
    engine, reference = engines(tmp_path, facts=given)
    assert not engine.reload() and not reference.reload()
    seen: list[set[str]] = []
    for chunk, rules in enumerate([first, second, first, second]):
        if chunk:
            _write(tmp_path, rules)
            assert not engine.reload() and not reference.reload()
        again = [replace(flow, last_ns=flow.last_ns + chunk * 10**13) for flow in flows[:75]]  # past the throttle
        found = same_detections(engine, reference, flows[chunk * 75:(chunk + 1) * 75] + again)
        seen.append({d[6]["rule"] for d in found})
        assert {d[6]["rule"] for d in found} <= {r["id"] for r in rules}
    assert seen[0] == {"SIG-A-1", "SIG-A-2", "SIG-A-3"} and seen[1] == {"SIG-A-1", "SIG-B-2", "SIG-B-3"}


def test_a_rule_with_a_thousand_conditions_loads_and_matches_as_the_reference(tmp_path: Path):
    """As many conditions as the loader's bounds let one file hold: one generated `and` chain per rule (nested
    blocks would stop Python's compiler at 100 levels, and a valid file would break the reload)."""
    rng = random.Random(3)
    given = GivenFacts()
    flows = [random_flow(rng, n, given) for n in range(200)]
    many = [{"field": "remote_port", "op": "gt", "value": -i} for i in range(1000)]
    _write(tmp_path, [_rule("SIG-MANY-1", "tcp", many + [{"field": "remote_port", "op": "in", "value": [4444]}]),
                      _rule("SIG-MANY-2", "dns", [{"field": "dns.qname_length", "op": "lt", "value": 1000 + i} for i in range(1000)])])
    engine, reference = engines(tmp_path, facts=given)
    assert not engine.reload() and not reference.reload() and engine.loaded == 2
    found = same_detections(engine, reference, flows)
    assert {d[6]["rule"] for d in found} == {"SIG-MANY-1", "SIG-MANY-2"}
