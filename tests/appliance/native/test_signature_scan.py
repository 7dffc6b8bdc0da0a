"""The signature layer's DNS loop in C (native dpi.dns_first_hits, signature_scan.h) as matcher.DnsScan drives
it, against the reference with memos small enough to overflow on every few names, more rules than one of its
states holds, and fed what it must refuse. Here, beside the other C tests, so that test_sanitized.py runs these
under AddressSanitizer and UndefinedBehaviorSanitizer too."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from appliance.detection.signatures import matcher
from appliance.detection.signatures.engine import RuleSet
from appliance.detection.signatures.fields import FIELDS, QTYPES, RCODES
from appliance.model import DnsMessage, FlowRecord, Transport
from appliance.native.dpi import dns_first_hits
from tests.appliance.native.test_dns_list import decoded
from tests.appliance.detection.signatures.test_engine import GivenFacts, engines, random_rule, shown

MESSAGE_FIELDS = [name for name in FIELDS if name.startswith("dns.")]


def _memos(scan: Any) -> dict[str, Any]:
    """The scan's memos, read from its states (what the bounds are about)."""
    return {f"{name}{j}": state[k] for j, state in enumerate(scan.states)
            for name, k in (("type_memo", 1), ("code_memo", 2), ("name_memo", 4))}


def dns_flow(rng: random.Random, n: int) -> FlowRecord:
    """A UDP flow of DNS messages over a few names, so names repeat within and across flows."""
    # Upper case, letters RE2 folds onto ASCII ones (the Kelvin sign onto k, the long s onto s), names at the
    # length bounds and past the 255 characters the C prefilters read: what the loop's prefilters must get right.
    labels = ['www', 'dnscat', 'DNSCAT', 'dn\u017fcat', 'a' * 30, 'xkcdqwrtzplm', 'XKCDQWRTZPLM', '\u212axcdqwrtzplm', '10',
              'b' * 88, 'dnscat' + 'c' * 300]
    names = [f"{rng.choice(labels)}.{rng.choice(['example.com', 'net', 'ru', 'xyz'])}" for _ in range(6)] + [""]
    flow = FlowRecord(f"dns{n}", "agent-a", 17, Transport.UDP, 0x0A000001, 40000, 0x08080808, 53, n * 10**12, n * 10**12 + 5)
    flow.dns = [DnsMessage(rng.randint(0, 65535), rng.random() < 0.5, rng.choice([*RCODES, 9]), rng.choice(names),
                           rng.choice([*QTYPES, 99]), 1) for _ in range(rng.randint(1, 12))]
    return flow


@pytest.mark.parametrize("decode", [False, True], ids=["lists", "decoded"])
@pytest.mark.parametrize("entries", [1, 2, 5])
def test_the_dns_scan_finds_what_the_reference_finds_with_memos_overflowing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entries: int,
                                                                            decode: bool):
    """Rule sets reading only message fields (the scan this is about), memos of a few entries: every flow
    finds what the reference finds, and no memo ever holds more than its bound. Decoded, the flows' messages are
    DnsLists, whose entries the C loop reads in place (test_dns_list.py)."""
    monkeypatch.setattr(matcher, "ITEM_MEMO_ENTRIES", entries)
    rng = random.Random(entries)
    flows = [dns_flow(rng, n) for n in range(150)]
    if decode:
        flows = decoded(flows)
    engine, reference = engines(tmp_path, facts=GivenFacts())
    hits = 0
    for round_ in range(25):
        rules = []
        for n in range(rng.randint(1, 8)):
            rule = random_rule(rng, f"{round_}-{n}", "dns")
            while any(c.field not in MESSAGE_FIELDS for c in rule.conditions):
                rule = random_rule(rng, f"{round_}-{n}", "dns")
            rules.append(rule)
        engine.ruleset = reference.ruleset = RuleSet.of(rules)
        scan = engine.ruleset.by_protocol["dns"].scan if "dns" in engine.ruleset.by_protocol else None
        for flow in flows:
            fast, slow = shown(engine.analyze(flow)), shown(reference.analyze(flow))
            assert fast == slow, (round_, flow.flow_id)
            hits += len(fast)
            if scan is not None:
                assert all(len(memo) <= entries for memo in _memos(scan).values())
    assert hits > 300  # the comparison is not vacuous


def test_more_dns_rules_than_one_c_state_holds_find_what_the_reference_finds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """150 rules reading message fields: three states of the C loop (64 rules each, their masks 64-bit), hits
    reported by rule index across them; memos small enough to overflow."""
    monkeypatch.setattr(matcher, "ITEM_MEMO_ENTRIES", 3)
    rng = random.Random(64)
    flows = [dns_flow(rng, n) for n in range(150)]
    engine, reference = engines(tmp_path, facts=GivenFacts())
    rules = []
    while len(rules) < 150:
        rule = random_rule(rng, f"many-{len(rules)}", "dns")
        if all(c.field in MESSAGE_FIELDS for c in rule.conditions):
            rules.append(rule)
    engine.ruleset = reference.ruleset = RuleSet.of(rules)
    assert len(engine.ruleset.by_protocol["dns"].scan.states) == 3  # type: ignore[attr-defined]
    found = set()
    for flow in flows:
        fast, slow = shown(engine.analyze(flow)), shown(reference.analyze(flow))
        assert fast == slow, flow.flow_id
        found |= {int(d[6]["rule"].rsplit("-", 1)[1]) for d in fast}
    assert min(found) < 64 and max(found) >= 128  # rules of the first and the last state matched


def _no_miss(*args: Any) -> int:
    raise AssertionError("a memo read missed")


def _state(type_memo: Any, code_memo: Any, query_alive: Any, name_memo: Any, miss: Any, match: Any, entries: Any = 8,
           offset: int = 0, prefilters: Any = ()) -> tuple[Any, ...]:
    return offset, type_memo, code_memo, query_alive, name_memo, miss, match, entries, prefilters


def test_the_c_loop_refuses_what_it_was_not_built_for_and_passes_errors_on():
    message = DnsMessage(1, True, 3, "example.com", 1, 1)
    flow = FlowRecord("f", "a", 17, Transport.UDP, 1, 2, 3, 53, 0, 1)
    good = ({1: 0b11}, {3: 0b01}, 0b10, {"example.com": (0b11, 0b01)})
    out: list[Any] = []
    assert dns_first_hits(out, 7, flow, [message, message], _state(*good, _no_miss, lambda *a: 0)) is None
    assert out == [(7, 0, message)]
    assert dns_first_hits(out, 7, flow, [message], _state(*good, _no_miss, _no_miss, offset=64)) is None
    assert out[1:] == [(7, 64, message)]  # a later state's rules come `offset` after
    with pytest.raises(TypeError):
        dns_first_hits(out, 0, flow, (message,), _state(*good, _no_miss, _no_miss))  # not a list
    with pytest.raises(TypeError):
        dns_first_hits(out, 0, flow, [message])  # an argument short
    with pytest.raises(TypeError):
        dns_first_hits(out, 0, flow, [message], _state(*good, _no_miss, _no_miss)[:8])  # a state item short
    with pytest.raises(TypeError):
        dns_first_hits(out, 0, flow, [message], _state(*good[:3], {"example.com": 5}, _no_miss, _no_miss))  # a bad entry
    with pytest.raises(TypeError):
        dns_first_hits(out, 0, flow, [message], _state([], *good[1:], _no_miss, _no_miss))  # a memo that is no dict
    with pytest.raises(OverflowError):
        dns_first_hits(out, 0, flow, [message], _state({1: 1 << 64}, *good[1:], _no_miss, _no_miss))  # past 64 rules
    with pytest.raises(OverflowError):
        dns_first_hits(out, 0, flow, [message], _state({1: -1}, *good[1:], _no_miss, _no_miss))  # no mask
    with pytest.raises(AttributeError):
        dns_first_hits(out, 0, flow, [object()], _state(*good, _no_miss, _no_miss))
    assert len(out) == 2  # nothing appended by a failed call

    def failing(*args: Any) -> int:
        raise RuntimeError("from the miss")

    with pytest.raises(RuntimeError):
        dns_first_hits(out, 0, flow, [message], _state({}, *good[1:], failing, _no_miss))
    with pytest.raises(RuntimeError):
        dns_first_hits(out, 0, flow, [message], _state(*good[:3], {}, _no_miss, failing))


def test_the_c_loop_survives_a_miss_that_empties_the_list_and_the_memos():
    """The callbacks run Python: one that empties the message list and the memos mid-loop ends the loop at
    the list's new end, without a crash."""
    flow = FlowRecord("f", "a", 17, Transport.UDP, 1, 2, 3, 53, 0, 1)
    messages = [DnsMessage(i, False, 0, f"n{i}.example", 1, 1) for i in range(5)]
    type_memo: dict[int, int] = {1: 0b11}
    name_memo: dict[str, tuple[int, int]] = {}
    calls = []

    def match(flow: FlowRecord, m: DnsMessage, wanted: int) -> int:
        calls.append(m.id)
        if m.id == 1:
            messages.clear()
            type_memo.clear()
            name_memo.clear()
        return 0

    out: list[Any] = []
    assert dns_first_hits(out, 0, flow, messages, _state(type_memo, {}, 0b11, name_memo, _no_miss, match, 3)) is None
    assert out == [] and calls == [0, 1] and messages == [] and list(name_memo) == ["n1.example"]


def test_the_loops_prefilters_rule_out_only_rules_that_cannot_hold(tmp_path: Path):
    """The C loop's prefilters (a regex's required literal and leading run, a name length bound) on names at
    their edges: exactly as long as the run or the bound, one shorter or longer, upper case, letters RE2 folds
    onto ASCII ones, digits where letters are wanted; each rule alone and together, against the reference."""
    from appliance.detection.signatures.rules import parse_rule

    names = ["abc", "ab", "abcd", "ABC", "a1c", "\u212abc", "\u017fbc", "dnscat", "DNSCAT", "xdnscaty", "dnsca",
             "x" * 12, "x" * 11, "x" * 13, "1", "12", "a", "abcdefghijkl.com", "ABCDEFGHIJKL.NET", "a" * 256 + "dnscat"]
    conditions = [("dns.qname", "regex", "^[a-z]{3}"), ("dns.qname", "regex", "^\\d"), ("dns.qname", "regex", "dnscat"),
                  ("dns.qname", "regex", "^[a-z]{12,}\\.(com|net)$"), ("dns.qname_length", "gt", 3),
                  ("dns.qname_length", "lt", 3), ("dns.qname_length", "gt", 12), ("dns.qname_length", "lt", 13)]
    rules = []
    for n, (field, op, value) in enumerate(conditions):
        rule, problems = parse_rule({"id": f"SIG-EDGE-{n}", "title": "t", "description": "d", "protocol": "dns",
                                     "category": "DnsTunneling", "severity": "Low", "confidence": 0.5,
                                     "conditions": [{"field": field, "op": op, "value": value}]}, "p.yaml")
        assert rule is not None, problems
        rules.append(rule)
    engine, reference = engines(tmp_path, facts=GivenFacts())
    hits = 0
    for chosen in [[rule] for rule in rules] + [rules]:
        engine.ruleset = reference.ruleset = RuleSet.of(chosen)
        for n, name in enumerate(names):
            flow = FlowRecord(f"edge{n}", "agent-a", 17, Transport.UDP, 1, 40000, 2, 53, n * 10**12, n * 10**12 + 5)
            flow.dns = [DnsMessage(1, False, 0, name, 1, 1), DnsMessage(1, True, 0, name, 1, 1)]
            fast, slow = shown(engine.analyze(flow)), shown(reference.analyze(flow))
            assert fast == slow, (name, [c.value for r in chosen for c in r.conditions])
            hits += len(fast)
    assert hits > 40
