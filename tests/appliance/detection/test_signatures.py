"""Signature rules: validation naming file/field/reason, REST management, hot reload with the real watcher."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from appliance.detection.signatures.fields import FIELDS
from appliance.detection.signatures.operators import OPERATORS
from appliance.detection.signatures.rules import load_directory, parse_rule
from tests.appliance.detection import scenarios as sc
from tests.appliance.detection.conftest import RULES, SHIPPED_RULES, alerts_of
from tests.polling import wait_for

RULE = {"id": "SIG-TEST-001", "title": "Test rule", "description": "POST to the test host", "protocol": "http",
        "category": "HttpExfiltration", "severity": "High", "confidence": 0.5, "enabled": True,
        "conditions": [{"field": "http.host", "op": "endswith", "value": "exfil-example.com"}]}


def test_shipped_rules_are_sixteen_over_five_protocols_and_the_readme_documents_every_operator_and_field():
    rules, errors = load_directory(RULES)
    assert errors == [] and len(rules) == SHIPPED_RULES
    assert {r.protocol for r in rules} == {"dns", "tls", "http", "icmp", "tcp"}
    assert len(OPERATORS) == 13 and len(FIELDS) == 29
    readme = (RULES / "README.md").read_text()
    for name in list(OPERATORS) + list(FIELDS):
        assert f"`{name}`" in readme, name


def test_every_problem_is_reported_in_one_pass_with_file_field_and_reason():
    bad = {"id": "../escape", "title": "", "protocol": "smtp", "category": "Malware", "severity": "Severe",
           "confidence": 2, "enabled": "yes", "extra": 1,
           "conditions": [{"field": "dns.qname", "op": "regex", "value": "("},
                          {"field": "nope", "op": "equals", "value": 1},
                          {"field": "remote_port", "op": "contains", "value": "x"},
                          {"field": "bytes_out", "op": "gt", "value": "big"}]}
    rule, errors = parse_rule(bad, "bad.yaml")
    assert rule is None
    text = "\n".join(map(str, errors))
    for fragment in ("bad.yaml: extra: unknown field", "bad.yaml: id:", "bad.yaml: title:", "bad.yaml: description: is required",
                     "bad.yaml: protocol:", "bad.yaml: category:", "bad.yaml: severity:", "bad.yaml: confidence:",
                     "bad.yaml: enabled:", "conditions[1].field: unknown field 'nope'", "conditions[2].op: contains does not apply",
                     "conditions[3].value: must be a number"):
        assert fragment in text, fragment
    assert len(errors) >= 11


def test_yaml_is_loaded_safely(tmp_path: Path):
    (tmp_path / "evil.yaml").write_text("!!python/object/apply:os.system ['echo pwned']\n")
    rules, errors = load_directory(tmp_path)
    assert rules == [] and errors and errors[0].file == "evil.yaml" and str(errors[0]).startswith("evil.yaml:")


def test_rest_lists_validates_creates_and_toggles(detecting):
    rest = detecting.rest
    status, body = rest.get("/api/v1/signatures")
    assert status == 200 and body["loaded"] == SHIPPED_RULES and body["last_error"] == []
    status, body = rest.post("/api/v1/signatures/validate", {**RULE, "conditions": [{"field": "http.host", "op": "like", "value": "x"}]})
    assert status == 422 and "conditions[0].op" in body["error"]
    assert not (detecting.tmp / "signatures" / "SIG-TEST-001.yaml").exists()
    status, body = rest.post("/api/v1/signatures", {**RULE, "confidence": "high"})
    assert status == 422 and not (detecting.tmp / "signatures" / "SIG-TEST-001.yaml").exists()
    assert rest.post("/api/v1/signatures/validate", RULE)[0] == 200
    status, body = rest.post("/api/v1/signatures", RULE)
    assert status == 200 and body["loaded"] == SHIPPED_RULES + 1
    path = detecting.tmp / "signatures" / "SIG-TEST-001.yaml"
    assert yaml.safe_load(path.read_text())["id"] == "SIG-TEST-001"
    status, body = rest.post("/api/v1/signatures", {**RULE, "title": "Renamed"})  # update in place
    assert status == 200 and body["loaded"] == SHIPPED_RULES + 1 and yaml.safe_load(path.read_text())["title"] == "Renamed"
    status, body = rest.post("/api/v1/signatures/SIG-TEST-001/toggle")
    assert status == 200 and body["rule"]["enabled"] is False
    assert yaml.safe_load(path.read_text())["enabled"] is False  # persisted in the file
    assert rest.post("/api/v1/signatures/NOPE/toggle")[0] == 404
    status, body = rest.post("/api/v1/signatures", {**RULE, "id": "../../etc/passwd"})
    assert status == 422 and "id" in body["error"]


def test_a_posted_rule_detects_on_the_next_flows(detecting):
    assert detecting.rest.post("/api/v1/signatures", RULE)[0] == 200
    sc.stream(detecting.stub(), sc.http_exfiltration())
    (alert,) = alerts_of(detecting)
    assert "signature:SIG-TEST-001" in {d["detector"] for d in alert["detections"]}


@pytest.mark.slow
def test_hot_reload_good_file_bad_file_and_burst(detecting):
    engine = detecting.app.detection.signatures
    directory = detecting.tmp / "signatures"
    reloads = engine.reloads
    (directory / "extra.yaml").write_text(yaml.safe_dump(RULE))
    # The engine swaps the rule set in, then counts the reload: wait for the count too.
    assert wait_for(lambda: engine.loaded == SHIPPED_RULES + 1 and engine.reloads == reloads + 1), engine.reloads
    assert engine.reloads == reloads + 1
    # A bad file: the previous set keeps running and the reason is reported.
    (directory / "broken.yaml").write_text(yaml.safe_dump({**RULE, "id": "SIG-BROKEN", "severity": "Severe"}))
    assert wait_for(lambda: engine.last_error != [])
    assert engine.loaded == SHIPPED_RULES + 1
    status, body = detecting.rest.get("/api/v1/signatures")
    assert body["loaded"] == SHIPPED_RULES + 1 and any("broken.yaml: severity" in e for e in body["last_error"])
    (directory / "broken.yaml").unlink()
    # The good reload clears the error, then counts itself: read the count for the burst once it has moved.
    assert wait_for(lambda: engine.last_error == [] and engine.reloads == reloads + 2), engine.reloads
    # A burst of edits within the debounce window gives one reload, of the final content.
    before = engine.reloads
    for i in range(20):
        (directory / "extra.yaml").write_text(yaml.safe_dump({**RULE, "title": f"edit {i}"}))
        time.sleep(0.01)
    assert wait_for(lambda: engine.get("SIG-TEST-001").title == "edit 19" and engine.reloads == before + 1)
    time.sleep(0.8)  # longer than the debounce: a second reload of the burst would have come by now
    assert engine.reloads == before + 1
    (directory / "extra.yaml").unlink()
    assert wait_for(lambda: engine.loaded == SHIPPED_RULES)


def test_reload_never_exposes_a_half_loaded_set(detecting):
    engine = detecting.app.detection.signatures
    directory = detecting.tmp / "signatures"
    seen: set[int] = set()
    for i in range(5):
        (directory / f"x{i}.yaml").write_text(yaml.safe_dump({**RULE, "id": f"SIG-X-{i}"}))
    deadline = time.time() + 15  # the debounce, then a reload on a machine that may be loaded
    while time.time() < deadline and engine.loaded != SHIPPED_RULES + 5:
        seen.add(len(engine.ruleset.rules))
    seen.add(len(engine.ruleset.rules))
    assert seen <= {SHIPPED_RULES, SHIPPED_RULES + 5} and engine.loaded == SHIPPED_RULES + 5
    assert detecting.rest.post("/api/v1/signatures/reload")[1]["loaded"] == SHIPPED_RULES + 5


def test_every_documented_example_is_a_valid_condition():
    import re as regex

    readme = (RULES / "README.md").read_text()
    examples = regex.findall(r"`(\{field: .*\})`", readme)
    assert len(examples) == len(OPERATORS) + len(FIELDS)  # every operator and every field has its example
    for example in examples:
        condition = yaml.safe_load(example)
        protocol = next(iter(sorted(FIELDS[condition["field"]].protocols)))
        rule, errors = parse_rule({**RULE, "protocol": protocol, "conditions": [condition]}, "example.yaml")
        assert errors == [], (example, errors)


def test_rule_problems_carry_file_field_and_reason_and_the_422_lists_them_by_field(appliance):
    hostile_key = "k" * 5000
    bad = {**RULE, "confidence": 2, hostile_key: 1, "conditions": [{"field": "http.host", "op": "like", "value": "x"}]}
    rule, problems = parse_rule(bad, "SIG-TEST-001.yaml")
    assert rule is None
    by_field = {p.field: p for p in problems}
    assert by_field["confidence"].file == "SIG-TEST-001.yaml"
    assert by_field["confidence"].reason.startswith("must be a number from 0.0 to 1.0")
    assert by_field["conditions[0].op"].reason.startswith("unknown operator 'like'")
    assert max(len(p.field) for p in problems) <= 80  # an attacker's key is cut in the problem
    status, body = appliance.rest.post("/api/v1/signatures/validate", bad)
    assert status == 422 and body["code"] == "INVALID_RULE" and body["field"] == problems[0].field
    assert body["fields"] == {p.field: p.reason for p in problems}


def test_in_list_names_a_shipped_list_and_refuses_anything_else_over_rest(detecting):
    rule = {**RULE, "protocol": "tls", "conditions": [{"field": "tls.ja4", "op": "in_list", "value": "known_bad_ja4"}]}
    assert detecting.rest.post("/api/v1/signatures/validate", rule)[0] == 200
    for bad in ("no_such_list", "../../etc/passwd", ["known_bad_ja4"], 7, "x" * 10_000):
        status, body = detecting.rest.post("/api/v1/signatures/validate", {**rule, "conditions": [{**rule["conditions"][0], "value": bad}]})
        assert status == 422 and "conditions[0].value" in body["error"] and "known_bad_ja4" in body["error"], body
        assert len(body["error"]) < 1000
    status, body = detecting.rest.post("/api/v1/signatures/validate", {**rule, "conditions": [{"field": "tls.cert.key_bits", "op": "in_list", "value": "known_bad_ja4"}]})
    assert status == 422 and "in_list does not apply to int field" in body["error"]


def test_the_regex_operator_answers_as_re2_search_does():
    """The operator calls the compiled RE2 directly (operators.py): it must agree with the wrapper's search()."""
    import random

    import re2

    from appliance.detection.signatures.operators import _regex_options

    patterns = [r"(dnscat|iodine)", r"^[a-z0-9]{30,}\.", r"\.onion$", r"é+x", r"a*", r"\bcmd\b", r"[^\x00-\x7f]",
                r"(?:[A-Za-z0-9+/]{4}){8,}", r"^$", r"x{2,3}y"]
    rng = random.Random(3)
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-+/éx€\U0001F600 "
    texts = ["", "DNSCAT.example.com", "iodine", "abc.onion", "ÉÉX", "run cmd now", "x" * 10_000 + "xxy"]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 80))) for _ in range(400)]
    for pattern in patterns:
        test = OPERATORS["regex"].build(pattern, "str")
        reference = re2.compile(pattern, _regex_options())
        for text in texts:
            assert test(text) == (reference.search(text) is not None), (pattern, text)


def test_the_regex_literal_prefilter_never_changes_an_answer():
    """required_literal (operators.py) lets the operator say no without RE2 when an ASCII text lacks a run of
    characters every match holds. Patterns built from atoms chosen to break that reading (optional and
    repeated characters, groups, classes with `]` and `[:`, escapes, flags, alternation, anchors) against
    texts rich in near misses: the operator answers exactly as RE2 alone."""
    import random

    import re2

    from appliance.detection.signatures.operators import OperatorValueError, _regex_options, required_literal

    rng = random.Random(17)
    atoms = ["a", "b", "c", "ab", "abc", "dnscat", "DnsCat", "k", "s", "\\.", "\\-", "\\$", "\\ ", ".", "[a-c]", "[^b]",
             "[]a]", "[[:alpha:]]", "\\d", "\\w", "\\b", "(a|b)", "(?:ab)", "(?i)", "(?-i)", "(?s:.)", "^", "$", "|",
             "x{1,2}", "é", "\\x41", "\\Qa.b\\E", "{", "}", "]", "-", ",", "=", "/"]
    quantifiers = ["", "", "", "", "?", "*", "+", "{2}", "{0,2}", "{1,}", "*?", "+?", "??", "{0}"]
    alphabet = ["a", "b", "c", "k", "s", "x", "A", "B", "C", "K", "S", ".", "-", "$", " ", "1", "dnscat", "DNSCAT",
                "dnScAt", "abc", "ABC", "\u212a", "\u017f", "é", "É", "=", "/", ","]
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 12))) for _ in range(300)]
    prefiltered = 0
    for _ in range(3000):
        pattern = "".join(rng.choice(atoms) + rng.choice(quantifiers) for _ in range(rng.randrange(1, 6)))
        try:
            test = OPERATORS["regex"].build(pattern, "str")
        except OperatorValueError:
            continue  # RE2 refuses it: no rule can hold it
        prefiltered += required_literal(pattern) != ""
        reference = re2.compile(pattern, _regex_options())
        for text in texts:
            assert test(text) == (reference.search(text) is not None), (pattern, text, required_literal(pattern))
    assert prefiltered > 200  # the prefilter was there to get wrong


def test_a_protocols_compiled_matcher_answers_as_each_rule_alone_would():
    """compile_lazy (one generated function per protocol, fields read lazily) against the plain reading of
    the rules: a rule matches when every one of its conditions holds on the item's field values."""
    import random

    from appliance.detection.signatures.matcher import GETTERS, compile_lazy, rule_indexes
    from appliance.model import DnsMessage, FlowRecord, Transport

    rng = random.Random(11)
    pool = [{"field": "dns.qname", "op": "regex", "value": "^[a-z]{3}\\."}, {"field": "dns.qname", "op": "endswith", "value": ".net"},
            {"field": "dns.qtype", "op": "in", "value": ["txt", "null"]}, {"field": "dns.qname_length", "op": "gt", "value": 12},
            {"field": "dns.rcode", "op": "equals", "value": "nxdomain"}, {"field": "remote_port", "op": "not_in", "value": [53]},
            {"field": "process_name", "op": "contains", "value": "py"}, {"field": "bytes_out", "op": "lt", "value": 500}]
    for round_ in range(40):
        rules = []
        for n in range(rng.randint(1, 8)):
            conditions = rng.sample(pool, rng.randint(1, 4))
            rule, errors = parse_rule({"id": f"SIG-T-{round_}-{n}", "title": "t", "description": "d", "protocol": "dns",
                                       "category": "DnsTunneling", "severity": "Low", "confidence": 0.5,
                                       "conditions": conditions}, "t.yaml")
            assert rule is not None, errors
            rules.append(rule)
        match = compile_lazy(tuple(rules))
        for _ in range(60):
            name = "".join(rng.choice("abc.net") for _ in range(rng.randint(0, 20)))
            flow = FlowRecord("f", "agent", 17, Transport.UDP, 1, 40000, 2, rng.choice([53, 5353]), 0, 1,
                              bytes_out=rng.randint(0, 1000), process_name=rng.choice(["", "Python3", "chrome"]))
            message = DnsMessage(1, rng.random() < 0.5, rng.choice([0, 3]), name, rng.choice([1, 16, 10]), 1)
            expected = [i for i, rule in enumerate(rules)
                        if all(c.test(GETTERS[c.field](flow, message)) for c in rule.conditions)]
            assert rule_indexes(match(flow, message)) == expected
