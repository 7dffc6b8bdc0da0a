"""Lazy matching: per protocol, one generated function that reads a field only when a rule needs it.

A flow yields items per rule protocol (fields.py): one per DNS message, per ClientHello, per HTTP
request, per ICMP echo sample, one for the flow (tcp, udp). A field's value is computed from the flow
and the item (FIELD_SOURCES) the first time a condition reads it, and kept for the rules after: with
the 18 shipped rules most items fail every rule's first condition, so most fields (the leaf
certificate's, the URI, the process name) are never computed at all, and the payload facts only for
flows a TLS or HTTP rule could match. Records (field -> value dicts) are built only for the hits, as
their evidence. The matching this replaced stays in tests/appliance/detection/signatures/reference.py,
the reference the tests hold this to. A kind of flow's protocols are scanned by one generated plan
function, all of a rule set's in one (compile_flows); the DNS messages' loop runs in C (DnsScan,
native/signature_scan.h).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from appliance.detection.detections import transport_name
from appliance.detection.facts import FlowFacts
from appliance.detection.signatures.fields import FIELDS, PROTOCOLS, QTYPES, RCODES
from appliance.detection.signatures.operators import OPERATORS, leading_run, required_literal
from appliance.detection.signatures.rules import Rule
from appliance.model import FlowRecord, Transport
from appliance.native.dpi import dns_first_hits

_QTYPE_TEXT = {code: name.lower() for code, name in QTYPES.items()}  # what rules compare: lower case
_RCODE_TEXT = {code: name.lower() for code, name in RCODES.items()}

# A field's value in one record, as a Python expression of `flow` and `item`: the item is the protocol's
# (the DnsMessage, the flow's Facts for tls, the HttpRequest, the ICMP echo Packet; None for tcp and udp).
# Written once here: compile_lazy writes them inline into the generated matcher, GETTERS are the same
# expressions as functions (for the records of hits).
FIELD_SOURCES: dict[str, str] = {
    "transport": "transport_name(flow)",
    "remote_ip": "flow.remote_addr",
    "remote_port": "flow.remote_port",
    "bytes_out": "flow.bytes_out",
    "bytes_in": "flow.bytes_in",
    "duration_s": "flow.duration_s",
    "process_name": "flow.process_name.lower()",
    "dns.qname": "item.qname",
    "dns.qname_length": "len(item.qname)",
    "dns.qtype": "(QTYPE_TEXT.get(item.qtype) or str(item.qtype))",
    "dns.rcode": "((RCODE_TEXT.get(item.rcode) or str(item.rcode)) if item.is_response else '')",
    "tls.sni": "item.client_hello.sni",  # TlsMetadata.sni without its property call (a tls item has a hello)
    "tls.version": "item.client_hello.version.lower()",
    "tls.ja4": "item.tls.ja4",
    "tls.ja4s": "item.tls.ja4s",
    "tls.ja3": "item.tls.ja3",
    "tls.alpn": "item.tls.alpn.lower()",
    "tls.cert.subject": "(item.tls.certificates[0].subject.lower() if item.tls.certificates else '')",
    "tls.cert.issuer": "(item.tls.certificates[0].issuer.lower() if item.tls.certificates else '')",
    "tls.cert.self_signed": "(int(item.tls.certificates[0].self_signed) if item.tls.certificates else 0)",
    "tls.cert.validity_days": "(int(item.tls.certificates[0].validity_days) if item.tls.certificates else 0)",
    "tls.cert.key_bits": "(item.tls.certificates[0].key_bits if item.tls.certificates else 0)",
    "http.method": "item.method.lower()",
    "http.host": "item.host",
    "http.uri": "item.uri.lower()",
    "http.user_agent": "item.user_agent.lower()",
    "http.content_length": "item.content_length",
    "icmp.type": "item.icmp.type",
    "icmp.payload_size": "max(len(item.icmp.data) - 4, 0)",
}
assert FIELD_SOURCES.keys() == FIELDS.keys(), "every matchable field needs its source"
# What the expressions may name besides flow and item.
_SOURCE_NAMES: dict[str, Any] = {"transport_name": transport_name, "QTYPE_TEXT": _QTYPE_TEXT, "RCODE_TEXT": _RCODE_TEXT}

Getter = Callable[[FlowRecord, Any], Any]
GETTERS: dict[str, Getter] = {
    name: eval(f"lambda flow, item: {source}", dict(_SOURCE_NAMES))  # noqa: S307 - the table above only
    for name, source in FIELD_SOURCES.items()
}

# Fields of the flow itself, the same in every item of it.
FLOW_FIELDS = frozenset(name for name, spec in FIELDS.items() if spec.protocols == frozenset(PROTOCOLS))

# The field a detection of the protocol names as its domain (the registered domain of a DNS name).
DOMAIN_FIELD = {"dns": "dns.qname", "tls": "tls.sni", "http": "http.host"}

# Memo of the costly tests (regex: RE2 over the text; cidr: parsing the address), keyed by the value: a
# Python dict hashes strings with keyed SipHash, so chosen values cannot pile up in one bucket. The
# same query names, SNIs and hosts come back flow after flow (a query and its answer are two records).
# Bounded twice: values longer than MEMO_MAX_VALUE are tested directly, and a full memo starts over.
MEMOISED_OPERATORS = frozenset({"regex", "cidr"})
MEMO_ENTRIES = 4096
MEMO_MAX_VALUE = 256


def memoised(test: Callable[[Any], bool], entries: int = MEMO_ENTRIES) -> tuple[Callable[[Any], bool | None], Callable[[Any], bool]]:
    """(lookup, test and remember): the generated matcher asks the memo itself, and tests only on a miss."""
    memo: dict[Any, bool] = {}

    def remembered(value: Any) -> bool:
        answer = bool(test(value))
        if len(value) <= MEMO_MAX_VALUE:
            if len(memo) >= entries:
                memo.clear()
            memo[value] = answer
        return answer

    return memo.get, remembered


# Matching one item: (flow, item) -> a bit mask of the rules whose conditions all hold: bit i for the
# protocol's rule i (an int: no list per item, and 0 when nothing matched, as for most items).
ItemMatcher = Callable[[FlowRecord, Any], int]


def compile_lazy(rules: tuple[Rule, ...], wanted: bool = False) -> Callable[..., int]:
    """One function for all of one protocol's rules, built once per load: (flow, item) -> hit mask.

    Each rule's conditions are one `and` chain (stopping at the first that fails); a field is computed
    (its FIELD_SOURCES expression, inline, assigned with `:=`) at its first read and reused by every
    later condition. Which reads can be the first is decided here, once: a field a rule reads
    unconditionally (its first condition) is known for every rule after it, as is a field an earlier
    condition of the same rule read; a field never read before is computed without a check, the others
    are checked against the UNSET marker. Tests are inline where the operator is one
    expression (operators.py templates: `v3 in K[4]`), else called; regex and cidr answers are memoised
    per value. No text of a rule file is ever compiled: the source holds indexes, the tables' templates
    and field expressions; rule values are reached through the tuples K, T and L bound below.
    Against the matcher of whole records it replaced (every field of every record built, then read):
    signatures 11.3 -> 3.8 µs per flow in the pipeline on the bench corpus (2026-11-24).
    With `wanted`, (flow, item, wanted mask) -> the hits among the wanted rules, the others not evaluated:
    the DNS scan asks only for the rules a message can still report.
    """
    body, tables = matcher_source(rules, wanted)
    lines = ["def match(flow, item, wanted):" if wanted else "def match(flow, item):", "    hits = 0"]
    lines += ["    " + line for line in body] + ["    return hits"]
    namespace: dict[str, Any] = {**_SOURCE_NAMES, **tables, "UNSET": _UNSET}
    exec(compile("\n".join(lines), "<signature rules>", "exec"), namespace)  # noqa: S102 - tables only, see above
    return namespace["match"]  # type: ignore[no-any-return]


def matcher_source(rules: tuple[Rule, ...], wanted: bool = False, tag: str = "") -> tuple[list[str], dict[str, Any]]:
    """compile_lazy's function body (unindented; it reads `flow`, `item`, `wanted` and adds to `hits`) and the
    tables it names (T, L, K and R, each followed by `tag`: one function can hold several bodies)."""
    T, L, K, R = (f"{table}{tag}" for table in "TLKR")  # noqa: N806 - the tables' names in the source
    fields: list[str] = []
    for rule in rules:
        for condition in rule.conditions:
            if condition.field not in fields:
                fields.append(condition.field)
    tests: list[Callable[[Any], bool] | None] = []  # per condition: its test, called, or None when inline
    lookups: list[Callable[[Any], bool | None] | None] = []  # per condition: its memo's lookup, if memoised
    constants: list[Any] = []  # per condition: an inline test's constant
    runs: list[Any] = []  # per regex with a leading run: its characters (a set of both cases when one)
    lines: list[str] = []
    touched: set[int] = set()  # fields some earlier rule may have fetched
    known: set[int] = set()  # fields fetched on every path to here
    checked: set[int] = set()  # fields read behind an UNSET check: they start as UNSET
    for index, rule in enumerate(rules):
        read: set[int] = set()  # fields this rule's earlier conditions read (they passed, so they were fetched)
        checks = []
        for condition in rule.conditions:
            f = fields.index(condition.field)
            if f in known or f in read:
                value = f"v{f}"
            elif f in touched:
                checked.add(f)
                value = f"(v{f} if v{f} is not UNSET else (v{f} := {FIELD_SOURCES[condition.field]}))"
            else:
                value = f"(v{f} := {FIELD_SOURCES[condition.field]})"
            read.add(f)
            position = len(tests)
            inline = OPERATORS[condition.op].inline
            if condition.op in MEMOISED_OPERATORS:
                lookup, remembered = memoised(condition.test)
                tests.append(remembered)
                lookups.append(lookup)
                required = required_literal(condition.value) if condition.op == "regex" else ""
                leading = leading_run(condition.value) if condition.op == "regex" else None
                # The regex test's own prefilters (operators.py), ahead of the memo: most new names and SNIs
                # lack the literal or do not open with the run, and a string test says so for less than the
                # memo's miss and store. ASCII texts only, as there.
                if leading is not None:
                    chars, length = leading
                    if length == 1:  # the first character, either case
                        runs.append(frozenset(chars + chars.upper()))
                        checks.append(f"(not {value}.isascii() or v{f}[:1] in {R}[{len(runs) - 1}])")
                    else:
                        runs.append(chars)
                        checks.append(f"(not {value}.isascii() or (len(v{f}) >= {length} and "
                                      f"not v{f}[:{length}].lower().lstrip({R}[{len(runs) - 1}])))")
                    value = f"v{f}"
                constants.append(required)
                if required:
                    checks.append(f"(not {value}.isascii() or {K}[{position}] in v{f}.lower())")
                    value = f"v{f}"
                # The memo is asked first: the value is fetched there, so the test on a miss reads the variable.
                checks.append(f"(r if (r := {L}[{position}]({value})) is not None else {T}[{position}](v{f}))")
            elif inline is None:
                tests.append(condition.test)
                lookups.append(None)
                constants.append(None)
                checks.append(f"{T}[{position}]({value})")
            else:
                template, constant = inline(condition.value, FIELDS[condition.field].kind)
                tests.append(None)
                lookups.append(None)
                constants.append(constant)
                checks.append(f"({template.format(v=value, k=f'{K}[{position}]')})")
        # One `and` chain per rule, however many conditions (nested ifs would meet Python's indentation limit).
        if wanted:  # only the rules asked for: (flow, item, wanted mask) -> the hits among them
            checks.insert(0, f"wanted & {1 << index}")
        lines += [f"if {' and '.join(checks)}:", f"    hits |= {1 << index}"]
        if not wanted:  # a rule's first condition is always evaluated (unless the rule is not asked for)
            known.add(fields.index(rule.conditions[0].field))
        touched |= read
    if checked:
        lines.insert(0, f"{' = '.join(f'v{i}' for i in sorted(checked))} = UNSET")
    return lines, {T: tuple(tests), L: tuple(lookups), K: tuple(constants), R: tuple(runs)}


class _Unset:
    """A field not fetched yet (no getter returns it)."""


_UNSET = _Unset()


def record_of(rule: Rule, flow: FlowRecord, item: Any) -> dict[str, Any]:
    """The fields a hit's detection reads: the rule's conditions' fields and the protocol's domain field."""
    names = [c.field for c in rule.conditions]
    domain = DOMAIN_FIELD.get(rule.protocol)
    if domain is not None:
        names.append(domain)
    return {name: GETTERS[name](flow, item) for name in names}


# A protocol's hits in one flow: (flow, the FlowFacts cache) -> (rule index, the first item the rule
# matched), ascending by rule index. Only the tls and http scans read the payload facts (parsed once per
# flow, shared with the DPI layer).
Scan = Callable[[FlowRecord, FlowFacts], Sequence[tuple[int, Any]]]
_ECHO = (0, 8)
_NO_HITS: tuple[tuple[int, Any], ...] = ()
ITEM_MEMO_ENTRIES = 4096


def compile_scan(protocol: str, rules: tuple[Rule, ...], match: ItemMatcher | None = None) -> Scan:
    """The protocol's scan of a flow: its items listed (fields.py: one per DNS message, ClientHello, HTTP
    request, ICMP echo sample; the flow itself for tcp and udp), the lazy matcher (`match`, compiled here
    when not given) run on each."""
    if match is None:
        match = compile_lazy(rules)
    if protocol in ("tcp", "udp"):
        def scan(flow: FlowRecord, facts: FlowFacts) -> Sequence[tuple[int, Any]]:
            hits = match(flow, None)
            return [(i, None) for i in rule_indexes(hits)] if hits else _NO_HITS
    elif protocol == "tls":
        def scan(flow: FlowRecord, facts: FlowFacts) -> Sequence[tuple[int, Any]]:
            found = facts.facts(flow)
            if found.tls is None or found.client_hello is None:
                return _NO_HITS
            hits = match(flow, found)
            return [(i, found) for i in rule_indexes(hits)] if hits else _NO_HITS
    elif protocol == "http":
        def scan(flow: FlowRecord, facts: FlowFacts) -> Sequence[tuple[int, Any]]:
            requests = facts.facts(flow).http_requests
            return _first_hits(flow, requests, match) if requests else _NO_HITS
    elif protocol == "icmp":
        def scan(flow: FlowRecord, facts: FlowFacts) -> Sequence[tuple[int, Any]]:
            echoes = [p for p in flow.samples if p.icmp is not None and p.icmp.type in _ECHO]
            return _first_hits(flow, echoes, match) if echoes else _NO_HITS
    elif any(c.field in FLOW_FIELDS for rule in rules for c in rule.conditions):
        def scan(flow: FlowRecord, facts: FlowFacts) -> Sequence[tuple[int, Any]]:
            return _first_hits(flow, [m for m in flow.dns if m.qname], match)
    else:
        scan = DnsScan(rules, ITEM_MEMO_ENTRIES)  # read at each compile: tests patch a small bound in
    return scan


# A kind of flow's hits over its plan (the protocols it is matched against, in order): [(step, rule index, item)],
# by step then rule index. A rule set's analysis of a flow: bound once per engine to its payload facts cache and
# to what makes detections of the hits, (flow) -> the detections (a new list per call).
FlowAnalysis = Callable[[FlowRecord], list[Any]]
# The same over many flows (AnalysisLayer.analyze_many): (flows, failed=None) -> [(index, detections)].
FlowsAnalysis = Callable[..., list[tuple[int, list[Any]]]]
Detect = Callable[[FlowRecord, Any, list[tuple[int, int, Any]]], list[Any]]
FlowBinder = Callable[[Any, Detect], tuple[FlowAnalysis, FlowsAnalysis]]

# Per protocol, its step of a plan as source: the matcher's body inline ({body}, matcher_source) on the flow (tcp,
# udp) or on the payload facts (tls; fetched once per flow, at the first step that reads them), the matcher M{s}
# run on each HTTP request, the C loop over the DNS messages per scan state (DnsScan: {dns}), or the protocol's
# scan S{s} called (icmp, and dns rules that read the flow's fields).
_PLAN_STEPS = {
    "tcp": ["item = None", "hits = 0", "{body}", "if hits:", "    out += [({k}, i, None) for i in rule_indexes(hits)]"],
    "tls": ["if found.tls is not None and found.client_hello is not None:", "    item = found", "    hits = 0", "    {body}",
            "    if hits:", "        out += [({k}, i, found) for i in rule_indexes(hits)]"],
    "http": ["if found.http_requests:", "    out += [({k}, i, item) for i, item in first_hits(flow, found.http_requests, M{s})]"],
    "dns": ["{dns}"],
    "scan": ["hits = S{s}(flow, facts)", "if hits:", "    out += [({k}, i, item) for i, item in hits]"],
}
_PLAN_STEPS["udp"] = _PLAN_STEPS["tcp"]
_READS_FACTS = frozenset({"tls", "http"})
# The transports most flows have first: each costs a comparison for the kinds after it.
_TRANSPORT_ORDER = (Transport.TCP, Transport.UDP, Transport.ICMP, Transport.OTHER)
assert set(_TRANSPORT_ORDER) == set(Transport), "every transport needs its place"


def _plan_source(plan: int, steps: Sequence[tuple[str, tuple[Rule, ...], ItemMatcher, Scan]],
                 namespace: dict[str, Any]) -> list[str]:
    """One plan's steps, (protocol, rules, matcher, scan) each, as lines that add its hits to `out`; the tables
    they name go into `namespace`, tagged with the plan's and the step's numbers."""
    lines: list[str] = []
    fetched = False
    for k, (protocol, rules, match, scan) in enumerate(steps):
        s = f"_{plan}_{k}"
        namespace[f"M{s}"], namespace[f"S{s}"] = match, scan
        if protocol in _READS_FACTS and not fetched:
            lines.append("found = facts_of(flow)")
            fetched = True
        kind = protocol if protocol != "dns" or isinstance(scan, DnsScan) else "scan"
        for line in _PLAN_STEPS.get(kind, _PLAN_STEPS["scan"]):
            indent = line[:len(line) - len(line.lstrip())]
            if line.strip() == "{body}":
                body, tables = matcher_source(rules, tag=s)
                namespace.update(tables)
                lines += [f"{indent}{source}" for source in body]
            elif line.strip() == "{dns}":
                for j, state in enumerate(scan.states):  # type: ignore[attr-defined]
                    namespace[f"D{s}_{j}"] = state
                    lines.append(f"dns_first_hits(out, {k}, flow, flow.dns, D{s}_{j})")
            else:
                lines.append(line.format(k=k, s=s))
    return lines


def compile_flows(plans: dict[tuple[Transport, bool], tuple[Any, Sequence[tuple[str, tuple[Rule, ...], ItemMatcher, Scan]]]]) -> FlowBinder:
    """Two functions for a rule set's plans, built once per load: per kind of flow (transport, has DNS), its plan
    (a value handed back to `detect` with the hits) and its steps, (protocol, rules, matcher, scan) each.

    What the scans one after the other would find, in one call per flow: the kind is told by two comparisons
    (no key tuple hashed), the flow's own record and its ClientHello are matched by their matchers' bodies
    written inline (with their own tables), the DNS messages by the C loop called straight from here, and
    the payload facts are read once (a TCP flow is matched against tcp, tls and http rules). Returned as
    `bind(facts, detect)` -> (analysis of a flow, analysis of many: AnalysisLayer.analyze_many, the same body in a
    loop): the facts cache and the engine's detections are closure cells, so the engine hands the pipeline the
    generated functions themselves. The source holds only the table above, step and plan numbers and
    matcher_source's bodies.
    """
    namespace: dict[str, Any] = {**_SOURCE_NAMES, "UNSET": _UNSET, "rule_indexes": rule_indexes, "first_hits": _first_hits,
                                 "dns_first_hits": dns_first_hits}
    # The body sets `detections` to the flow's (an empty list or None when there are none); the steps' own names are
    # out, hits (bits), item, found (the facts) and v<n>.
    body = ["transport = flow.transport"]
    kinds = [(transport, has_dns) for transport in _TRANSPORT_ORDER for has_dns in (True, False) if (transport, has_dns) in plans]
    for p, (transport, has_dns) in enumerate(kinds):
        first = p == 0 or kinds[p - 1][0] != transport
        last = p + 1 == len(kinds) or kinds[p + 1][0] != transport
        if first:
            namespace[f"X{p}"] = transport
            body.append(f"{'if' if p == 0 else 'elif'} transport == X{p}:")
        # With DNS first; the plan without DNS after it is its else (one read of flow.dns for a TLS flow, not two).
        body.append("    else:" if not first else "    if flow.dns:" if has_dns else "    if not flow.dns:")
        namespace[f"P{p}"], steps = plans[transport, has_dns]
        body += ["        out = []"] + [f"        {line}" for line in _plan_source(p, steps, namespace)]
        body.append(f"        detections = detect(flow, P{p}, out) if out else None")
        if first and last:  # one kind of this transport: the other finds nothing
            body += ["    else:", "        detections = None"]
    body += ["else:", "    detections = None"] if kinds else ["detections = None"]
    lines = ["def bind(facts, detect):", "    facts_of = facts.facts",
             "    def analyze(flow):", *[f"        {line}" for line in body], "        return detections or []",
             "    def analyze_many(flows, failed=None):",
             "        flagged = []",
             "        for i, flow in enumerate(flows):",
             "            try:", *[f"                {line}" for line in body],
             "            except Exception:",
             "                if failed is None:",
             "                    raise",
             "                failed(flow)",
             "                continue",
             "            if detections:",
             "                flagged.append((i, detections))",
             "        return flagged",
             "    return analyze, analyze_many"]
    exec(compile("\n".join(lines), "<signature plans>", "exec"), namespace)  # noqa: S102 - tables only, see above
    return namespace["bind"]  # type: ignore[no-any-return]



def rule_indexes(hits: int) -> list[int]:
    """The rule indexes of a hit mask, ascending."""
    indexes = []
    while hits:
        low = hits & -hits
        indexes.append(low.bit_length() - 1)
        hits ^= low
    return indexes


def _first_hits(flow: FlowRecord, items: Sequence[Any], match: ItemMatcher) -> Sequence[tuple[int, Any]]:
    reported = 0  # rules that matched an earlier item
    first: list[tuple[int, Any]] = []
    for item in items:
        new = match(flow, item) & ~reported
        if new:
            reported |= new
            first += [(i, item) for i in rule_indexes(new)]
    return sorted(first, key=_rule_index) if first else _NO_HITS


# The DNS fields a message's hits depend on, by the part of the message each is a function of.
_DNS_PARTS = {"dns.qtype": "qtype", "dns.rcode": "rcode", "dns.qname": "qname", "dns.qname_length": "qname"}


def _part_tests(rules: tuple[Rule, ...], part: str) -> tuple[tuple[Callable[[Any], bool], ...], ...]:
    """Per rule, the tests of its conditions on one part of a DNS message."""
    return tuple(tuple(c.test for c in rule.conditions if _DNS_PARTS[c.field] == part) for rule in rules)


def _dns_state(rules: tuple[Rule, ...], offset: int, entries: int) -> tuple[Any, ...]:
    """One scan state of the C loop (native dpi.dns_first_hits, signature_scan.h) for at most DNS_STATE_RULES
    rules, the protocol's rules from `offset` on: (offset, type_memo, code_memo, query_alive, name_memo, miss,
    match, entries, prefilters), with the memos empty."""
    # The rules' name conditions only (a rule without one holds for every name): an entry says which rules' name
    # conditions hold, whatever the type and code of the message that asked.
    match = compile_lazy(tuple(replace(rule, conditions=tuple(c for c in rule.conditions if _DNS_PARTS[c.field] == "qname"))
                               for rule in rules), wanted=True)
    type_tests, code_tests = (_part_tests(rules, part) for part in ("qtype", "rcode"))
    qtype_of, rcode_of = GETTERS["dns.qtype"], GETTERS["dns.rcode"]

    def holding(tests: tuple[tuple[Callable[[Any], bool], ...], ...], value: Any) -> int:
        """The rules whose conditions on one part (`tests`) hold for the part's value."""
        return sum(1 << i for i, conditions in enumerate(tests) if all(test(value) for test in conditions))

    type_memo: dict[int, int] = {}
    code_memo: dict[int, int] = {}  # responses' codes
    query_alive = holding(code_tests, rcode_of(None, _Message(is_response=False)))
    name_memo: dict[str, tuple[int, int]] = {}  # name -> (rules evaluated, rules whose name conditions hold)

    def type_code_miss(flow: FlowRecord, m: Any, reported: int) -> int:
        """A message's new hits when its type or code is not in the tables yet: fills them, then as in C."""
        alive = type_memo.get(m.qtype)
        if alive is None:
            if len(type_memo) >= entries:
                type_memo.clear()
            alive = type_memo[m.qtype] = holding(type_tests, qtype_of(None, m))
        if m.is_response:
            code = code_memo.get(m.rcode)
            if code is None:
                if len(code_memo) >= entries:
                    code_memo.clear()
                code = code_memo[m.rcode] = holding(code_tests, rcode_of(None, m))
            alive &= code
        else:
            alive &= query_alive
        alive &= ~reported
        if not alive or not m.qname:
            return 0
        entry = name_memo.get(m.qname)
        return name_miss(flow, m, alive) if entry is None or alive & ~entry[0] else entry[1] & alive

    def name_miss(flow: FlowRecord, m: Any, alive: int) -> int:
        """The alive rules' name hits when the name's entry lacks some of them: evaluated and remembered (the
        C loop does the same in sigscan_name_miss)."""
        qname = m.qname
        evaluated, holds = name_memo.get(qname, (0, 0))
        wanted = alive & ~evaluated
        holds |= match(flow, m, wanted)
        if len(name_memo) >= entries:
            name_memo.clear()
        name_memo[qname] = (evaluated | wanted, holds)
        return holds & alive

    return offset, type_memo, code_memo, query_alive, name_memo, type_code_miss, match, entries, _name_prefilters(rules)


# The C loop's prefilter ops (signature_scan.h sigscan_fails): a regex's required literal, a name length bound.
_LITERAL, _LONGER, _SHORTER, _RUN = 0, 1, 2, 3
_LENGTH_OPS = {"gt": _LONGER, "lt": _SHORTER}


def _name_prefilters(rules: tuple[Rule, ...]) -> tuple[tuple[int, int, Any], ...]:
    """(rule index, op, value) per name condition the C loop can rule a rule out with before calling the matcher:
    a regex's required literal and leading run (operators.required_literal, leading_run: absent from an ASCII name,
    the regex cannot match, as the operator's own prefilters say) and a `gt`/`lt` on the name's length (the
    condition itself)."""
    checks: list[tuple[int, int, Any]] = []
    for i, rule in enumerate(rules):
        for c in rule.conditions:
            if c.field == "dns.qname" and c.op == "regex":
                literal, run = required_literal(c.value), leading_run(c.value)
                if literal:
                    checks.append((i, _LITERAL, literal.encode("ascii")))
                if run is not None:
                    checks.append((i, _RUN, (run[0].encode("ascii"), run[1])))
            elif (c.field == "dns.qname_length" and c.op in _LENGTH_OPS and type(c.value) is int
                  and -(1 << 62) < c.value < 1 << 62):
                checks.append((i, _LENGTH_OPS[c.op], c.value))
    return tuple(checks)


DNS_STATE_RULES = 64  # rules per state of the C loop: its masks are 64-bit integers


class DnsScan:
    """The DNS scan when the rules read only the messages' fields (none of the flow's).

    A rule holds for a message when its conditions on each part hold (a conjunction of pure tests), so a
    message's hits split: `alive`, the rules whose qtype and rcode conditions hold, from two small tables
    (memoised per qtype and per response code), less the rules an earlier message of the flow matched
    (a rule reports its first message only); and, for the alive rules only, whether their name conditions
    hold, a function of the name alone, memoised per name as (rules evaluated, rules holding) and extended
    when a message asks for rules not evaluated yet: a query and its answer, A and AAAA share one entry, and
    a name test (a regex) runs once per name and only for a rule the message's type and code leave alive.
    The loop over the messages runs in C (native dpi.dns_first_hits, signature_scan.h), one call per state
    (`states`: 64 rules each, with their own memos), and calls back here on a memo miss. Dicts throughout:
    keyed SipHash of the attacker-chosen names; bounded, a full memo starts over (`entries` each, as the
    item memo this replaced). compile_flows calls the C loop itself; calling the scan gives [(rule index,
    first matching message)].
    Against the per-(name, type, code) memo it replaced, on the bench corpus's DNS flows (mostly names
    seen once: DGA bursts, tunnels): 3.9 -> 2.7-2.9 us per flow, fresh memos (2026-11-24); with the loop's
    masks as C integers, its slot reads, an answer taking its query's entry, no Python call between the
    pipeline and the loop, and the loop's prefilters sparing most name misses a call of the name matcher
    (~0.5 us each): 2.4-2.6 -> 1.4 (bytype.py).
    """

    def __init__(self, rules: tuple[Rule, ...], entries: int) -> None:
        self.states = tuple(_dns_state(rules[k:k + DNS_STATE_RULES], k, entries) for k in range(0, len(rules), DNS_STATE_RULES))

    def __call__(self, flow: FlowRecord, facts: FlowFacts) -> Sequence[tuple[int, Any]]:
        out: list[tuple[int, int, Any]] = []
        for state in self.states:
            dns_first_hits(out, 0, flow, flow.dns, state)
        return [(i, m) for _, i, m in out]


class _Message:
    """A query's fields as the rcode getter reads them (GETTERS keep each field's expression in one place)."""

    __slots__ = ("rcode", "is_response")

    def __init__(self, is_response: bool) -> None:
        self.rcode, self.is_response = 0, is_response


def _rule_index(hit: tuple[int, Any]) -> int:
    return hit[0]
