"""The generated matchers: the wanted-rules matcher the DNS scan calls (its C loop is tested in
tests/appliance/native/test_signature_scan.py) and the inline regex prefilters."""

from __future__ import annotations

import random

from appliance.detection.signatures import matcher
from appliance.model import DnsMessage, FlowRecord, Transport
from tests.appliance.detection.signatures.test_engine import GivenFacts, random_flow, random_rule


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
