"""Item 6: a YAML alias bomb (369 bytes) and an oversized file in the signatures directory.

Shared aliases cost nothing until something prints them; the rule validator printed the bad value
in its error, 72 MB of it, into `last_error` and the log. Now the loader counts nodes with aliases
expanded, caps file size, and cuts error texts, and the running rule set stays in place.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from appliance.detection.signatures.rules import MAX_RULE_FILE_BYTES
from tests.appliance.security.conftest import status_probe

RULES = Path(__file__).resolve().parents[3] / "rules"

BOMB = """id: SIG-BOMB
title: t
description: d
protocol: dns
severity: Low
confidence: 0.5
conditions: [{field: dns.qname, op: contains, value: x}]
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
category: [*f,*f,*f,*f,*f,*f,*f,*f,*f]
"""


def _with_shipped_rules(appliance) -> int:
    directory = appliance.app.settings.paths.signatures_dir
    directory.mkdir(parents=True, exist_ok=True)
    for rule in RULES.glob("*.yaml"):
        shutil.copy(rule, directory / rule.name)
    state = appliance.rest.post("/api/v1/signatures/reload")[1]
    assert state["last_error"] == []
    return state["loaded"]


def test_an_alias_bomb_is_refused_with_a_short_error_and_the_rules_keep_running(appliance, caplog):
    loaded = _with_shipped_rules(appliance)
    assert len(BOMB.encode()) < 600
    (appliance.app.settings.paths.signatures_dir / "bomb.yaml").write_text(BOMB)
    caplog.set_level(logging.INFO)
    with status_probe(appliance):
        status, state = appliance.rest.post("/api/v1/signatures/reload")
    assert status == 200
    assert state["loaded"] == loaded  # the previous set still runs
    (problem,) = state["last_error"]
    assert problem.startswith("bomb.yaml: ") and "aliases" in problem and len(problem) <= 300
    assert max(len(r.getMessage()) for r in caplog.records) < 5000


def test_an_oversized_rule_file_is_not_read(appliance):
    loaded = _with_shipped_rules(appliance)
    big = "id: SIG-BIG\n" + "# padding\n" * (MAX_RULE_FILE_BYTES // 10 + 1)
    (appliance.app.settings.paths.signatures_dir / "big.yaml").write_text(big)
    state = appliance.rest.post("/api/v1/signatures/reload")[1]
    assert state["loaded"] == loaded
    assert state["last_error"] == [f"big.yaml: <file>: larger than {MAX_RULE_FILE_BYTES} bytes"]


def test_a_huge_bad_value_in_a_posted_rule_is_cut_in_the_error(appliance):
    rule = {"id": "SIG-X", "title": "t", "description": "d", "protocol": "dns", "category": ["x" * 1000] * 1000,
            "severity": "Low", "confidence": 0.5, "conditions": [{"field": "dns.qname", "op": "contains", "value": "x"}]}
    status, body = appliance.rest.post("/api/v1/signatures/validate", rule)
    assert status == 422 and body["field"] == "category" and len(body["error"]) <= 300, body
