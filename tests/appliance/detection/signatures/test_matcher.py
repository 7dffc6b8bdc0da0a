"""The DNS scan (matcher._dns_scan, its loop in C: native dpi.dns_first_hits) against the reference with memos
small enough to overflow on every few names, its bounds, the wanted-rules matcher it calls, and the C loop
fed what it must refuse."""

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
from tests.appliance.detection.signatures.test_engine import GivenFacts, engines, random_flow, random_rule, shown

MESSAGE_FIELDS = [name for name in FIELDS if name.startswith("dns.")]


def _memos(scan: Any) -> dict[str, Any]:
    """The scan's memos, read from its closure (what the bounds are about)."""
    cells = dict(zip(scan.__code__.co_freevars, scan.__closure__))
    return {name: cells[name].cell_contents for name in ("type_memo", "code_memo", "name_memo")}


def dns_flow(rng: random.Random, n: int) -> FlowRecord:
    """A UDP flow of DNS messages over a few names, so names repeat within and across flows."""
    names = [f"{rng.choice(['www', 'dnscat', 'a' * 30, 'xkcdqwrtzplm', '10'])}.{rng.choice(['example.com', 'net', 'ru', 'xyz'])}"
             for _ in range(6)] + [""]
    flow = FlowRecord(f"dns{n}", "agent-a", 17, Transport.UDP, 0x0A000001, 40000, 0x08080808, 53, n * 10**12, n * 10**12 + 5)
    flow.dns = [DnsMessage(rng.randint(0, 65535), rng.random() < 0.5, rng.choice([*RCODES, 9]), rng.choice(names),
                           rng.choice([*QTYPES, 99]), 1) for _ in range(rng.randint(1, 12))]
    return flow


@pytest.mark.parametrize("entries", [1, 2, 5])
def test_the_dns_scan_finds_what_the_reference_finds_with_memos_overflowing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entries: int):
    """Rule sets reading only message fields (the scan this is about), memos of a few entries: every flow
    finds what the reference finds, and no memo ever holds more than its bound."""
    monkeypatch.setattr(matcher, "ITEM_MEMO_ENTRIES", entries)
    rng = random.Random(entries)
    flows = [dns_flow(rng, n) for n in range(150)]
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


def test_the_wanted_rules_matcher_answers_as_the_plain_one_masked():
    """compile_lazy(wanted=True): (flow, item, wanted) -> the plain matcher's hits among the wanted rules, for
    any wanted mask, with fields shared between rules (the first read of a field may be skipped now)."""
    rng = random.Random(5)
    given = GivenFacts()
    flows = [f for f in (random_flow(rng, n, given) for n in range(300)) if f.dns]
    for round_ in range(40):
        rules = tuple(random_rule(rng, f"{round_}-{n}", "dns") for n in range(rng.randint(1, 10)))
        plain, wanted = matcher.compile_lazy(rules), matcher.compile_lazy(rules, wanted=True)
        for flow in flows:
            for m in flow.dns:
                mask = rng.getrandbits(len(rules))
                assert wanted(flow, m, mask) == plain(flow, m) & mask


def _no_miss(*args: Any) -> int:
    raise AssertionError("a memo read missed")


def test_the_c_loop_refuses_what_it_was_not_built_for_and_passes_errors_on():
    message = DnsMessage(1, True, 3, "example.com", 1, 1)
    flow = FlowRecord("f", "a", 17, Transport.UDP, 1, 2, 3, 53, 0, 1)
    good = ({1: 0b11}, {3: 0b01}, 0b10, {"example.com": (0b11, 0b01)})
    assert dns_first_hits(flow, [message, message], *good, _no_miss, lambda *a: 0, 8) == [(0b01, message)]
    with pytest.raises(TypeError):
        dns_first_hits(flow, (message,), *good, _no_miss, _no_miss, 8)  # not a list
    with pytest.raises(TypeError):
        dns_first_hits(flow, [message], *good, _no_miss, _no_miss)  # an argument short
    with pytest.raises(TypeError):
        dns_first_hits(flow, [message], *good[:3], {"example.com": 5}, _no_miss, _no_miss, 8)  # a bad entry
    with pytest.raises(TypeError):
        dns_first_hits(flow, [message], [], *good[1:], _no_miss, _no_miss, 8)  # a memo that is no dict
    with pytest.raises(AttributeError):
        dns_first_hits(flow, [object()], *good, _no_miss, _no_miss, 8)

    def failing(*args: Any) -> int:
        raise RuntimeError("from the miss")

    with pytest.raises(RuntimeError):
        dns_first_hits(flow, [message], {}, *good[1:], failing, _no_miss, 8)
    with pytest.raises(RuntimeError):
        dns_first_hits(flow, [message], *good[:3], {}, _no_miss, failing, 8)


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

    assert dns_first_hits(flow, messages, type_memo, {}, 0b11, name_memo, _no_miss, match, 3) is None
    assert calls == [0, 1] and messages == [] and list(name_memo) == ["n1.example"]


def test_the_inline_regex_prefilters_never_change_a_matchers_answer():
    """The generated matcher tests a regex's leading run and literal inline, ahead of its memo: against each
    rule's plain tests (operators.py, RE2 behind the same prefilters, held equal to RE2 in test_operators.py),
    on names that open with digits, letters of either case, letters that fold onto ASCII ones, or nothing."""
    from appliance.detection.signatures.rules import parse_rule

    rng = random.Random(9)
    patterns = [r"^\d{1,3}(\.\d{1,3}){3}$", r"^[a-z]{12,}\.(com|net)$", r"^[a-f0-9]{4}", r"^[k]", r"(^|\.)dnscat\.",
                r"^[a-z]+dnscat", r"^\d", r"example"]
    alphabet = ["1", "2", "0", ".", "a", "b", "f", "k", "K", "\u212a", "x", "dnscat", "DNSCAT", "example", "com", "-"]
    names = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 16))) for _ in range(400)]
    names += ["192.0.2.1", "abcdefghijklm.com", "ABCDEFGHIJKLM.NET", "\u212aabcdefghijkl.com", "1234.example"]
    for round_ in range(30):
        rules = []
        for n in range(rng.randint(1, 5)):
            conditions = [{"field": "dns.qname", "op": "regex", "value": rng.choice(patterns)} for _ in range(rng.randint(1, 3))]
            rule, problems = parse_rule({"id": f"SIG-P-{round_}-{n}", "title": "t", "description": "d", "protocol": "dns",
                                         "category": "DnsTunneling", "severity": "Low", "confidence": 0.5,
                                         "conditions": conditions}, "p.yaml")
            assert rule is not None, problems
            rules.append(rule)
        match = matcher.compile_lazy(tuple(rules))
        flow = FlowRecord("f", "a", 17, Transport.UDP, 1, 2, 3, 53, 0, 1)
        for name in names * 2:  # twice: answers from the memos too
            m = DnsMessage(1, False, 0, name, 1, 1)
            expected = sum(1 << i for i, rule in enumerate(rules) if all(c.test(name) for c in rule.conditions))
            assert match(flow, m) == expected, (name, [c.value for r in rules for c in r.conditions])
