"""Lazy matching: per protocol, one generated function that reads a field only when a rule needs it.

A flow yields items per rule protocol (fields.py): one per DNS message, per ClientHello, per HTTP
request, per ICMP echo sample, one for the flow (tcp, udp). A field's value is computed from the flow
and the item (FIELD_SOURCES) the first time a condition reads it, and kept for the rules after: with
the 18 shipped rules most items fail every rule's first condition, so most fields (the leaf
certificate's, the URI, the process name) are never computed at all, and the payload facts only for
flows a TLS or HTTP rule could match. Records (field -> value dicts) are built only for the hits, as
their evidence. The matching this replaced stays in tests/appliance/detection/signatures/reference.py,
the reference the tests hold this to.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from appliance.detection.detections import transport_name
from appliance.detection.facts import FlowFacts
from appliance.detection.signatures.fields import FIELDS, PROTOCOLS, QTYPES, RCODES
from appliance.detection.signatures.operators import OPERATORS, required_literal
from appliance.detection.signatures.rules import Rule
from appliance.model import FlowRecord

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


def compile_lazy(rules: tuple[Rule, ...]) -> ItemMatcher:
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
    """
    fields: list[str] = []
    for rule in rules:
        for condition in rule.conditions:
            if condition.field not in fields:
                fields.append(condition.field)
    tests: list[Callable[[Any], bool] | None] = []  # per condition: its test, called, or None when inline
    lookups: list[Callable[[Any], bool | None] | None] = []  # per condition: its memo's lookup, if memoised
    constants: list[Any] = []  # per condition: an inline test's constant
    lines = ["def match(flow, item):", "    hits = 0"]
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
                constants.append(required)
                if required:
                    # The regex test's own literal prefilter (operators.py), ahead of the memo: most new names
                    # lack the literal, and a substring test says so for less than the memo's miss and store.
                    checks.append(f"(not {value}.isascii() or K[{position}] in v{f}.lower())")
                    value = f"v{f}"
                # The memo is asked first: the value is fetched there, so the test on a miss reads the variable.
                checks.append(f"(r if (r := L[{position}]({value})) is not None else T[{position}](v{f}))")
            elif inline is None:
                tests.append(condition.test)
                lookups.append(None)
                constants.append(None)
                checks.append(f"T[{position}]({value})")
            else:
                template, constant = inline(condition.value, FIELDS[condition.field].kind)
                tests.append(None)
                lookups.append(None)
                constants.append(constant)
                checks.append(f"({template.format(v=value, k=f'K[{position}]')})")
        # One `and` chain per rule, however many conditions (nested ifs would meet Python's indentation limit).
        lines += [f"    if {' and '.join(checks)}:", f"        hits |= {1 << index}"]
        first = fields.index(rule.conditions[0].field)
        known.add(first)  # a rule's first condition is always evaluated
        touched |= read
    if checked:
        lines.insert(1, f"    {' = '.join(f'v{i}' for i in sorted(checked))} = UNSET")
    lines.append("    return hits")
    namespace: dict[str, Any] = {**_SOURCE_NAMES, "T": tuple(tests), "L": tuple(lookups), "K": tuple(constants), "UNSET": _UNSET}
    exec(compile("\n".join(lines), "<signature rules>", "exec"), namespace)  # noqa: S102 - tables only, see above
    return namespace["match"]  # type: ignore[no-any-return]


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


def compile_scan(protocol: str, rules: tuple[Rule, ...]) -> Scan:
    """The protocol's scan of a flow: its items listed (fields.py: one per DNS message, ClientHello, HTTP
    request, ICMP echo sample; the flow itself for tcp and udp), the lazy matcher run on each."""
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
        scan = _dns_scan(rules, match, ITEM_MEMO_ENTRIES)  # read at each compile: tests patch a small bound in
    return scan


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


# The DNS fields a message's hits depend on, split by what each is a function of: the question type (its
# text), the response code (its text; "" for a query) and the name (the name itself and its length).
_DNS_PARTS = {"dns.qtype": "qtype", "dns.rcode": "rcode", "dns.qname": "qname", "dns.qname_length": "qname"}


def _part_tests(rules: tuple[Rule, ...], part: str) -> tuple[tuple[tuple[str, Callable[[Any], bool]], ...], ...]:
    """Per rule, its conditions on one part of a DNS message: (field, test), regex and cidr answers memoised
    as in the generated matcher (the same bounds)."""
    return tuple(tuple((c.field, memoised_test(c) if c.op in MEMOISED_OPERATORS else c.test)
                       for c in rule.conditions if _DNS_PARTS[c.field] == part) for rule in rules)


def memoised_test(condition: Any) -> Callable[[Any], bool]:
    """The condition's test behind its bounded memo (memoised above), as one call."""
    lookup, remembered = memoised(condition.test)

    def test(value: Any) -> bool:
        answer = lookup(value)
        return remembered(value) if answer is None else answer

    return test


def _dns_scan(rules: tuple[Rule, ...], match: ItemMatcher, entries: int = ITEM_MEMO_ENTRIES) -> Scan:
    """The DNS scan when the rules read only the messages' fields (none of the flow's). A rule holds for a
    message when its conditions on each part hold (a conjunction, and the tests are pure), so a message's
    hits are `alive & name hits`: `alive`, the rules whose qtype and rcode conditions hold, from two small
    tables (memoised per qtype and per response code); the name hits, evaluated only for the alive rules,
    memoised per (alive, name): a query and its answer, A and AAAA share one entry, and the costly name
    tests (regexes) never run for a rule the message's type or code already rules out. A flow carries 7-8
    messages on the bench corpus, mostly the same few names, and names come back flow after flow. Dicts:
    keyed SipHash of the attacker-chosen names (str hashes are cached in the string: no key tuple per
    message); bounded, a full memo starts over."""
    type_tests, code_tests, name_tests = (_part_tests(rules, part) for part in ("qtype", "rcode", "qname"))
    qtype_of, rcode_of, length_of = GETTERS["dns.qtype"], GETTERS["dns.rcode"], GETTERS["dns.qname_length"]

    def holding(tests: tuple[tuple[tuple[str, Callable[[Any], bool]], ...], ...], value: Any, wanted: int) -> int:
        hits = 0
        for i in rule_indexes(wanted):
            if all(test(value) for _, test in tests[i]):
                hits |= 1 << i
        return hits

    everyone = (1 << len(rules)) - 1
    type_memo: dict[int, int] = {}
    code_memo: dict[int, int] = {}  # responses' codes
    query_alive = holding(code_tests, rcode_of(None, _Message(is_response=False)), everyone)
    by_alive: dict[int, dict[str, int]] = {}  # alive -> name -> hits (a subset of alive)
    size = [0]

    def type_miss(qtype: int) -> int:
        if len(type_memo) >= entries:
            type_memo.clear()
        hits = type_memo[qtype] = holding(type_tests, qtype_of(None, _Message(qtype=qtype)), everyone)
        return hits

    def code_miss(rcode: int) -> int:
        if len(code_memo) >= entries:
            code_memo.clear()
        hits = code_memo[rcode] = holding(code_tests, rcode_of(None, _Message(is_response=True, rcode=rcode)), everyone)
        return hits

    def name_miss(flow: FlowRecord, m: Any, alive: int) -> int:
        if size[0] >= entries or len(by_alive) >= entries:
            by_alive.clear()
            size[0] = 0
        names = by_alive.get(alive)
        if names is None:
            names = by_alive[alive] = {}
        hits = names[m.qname] = match(flow, m)
        size[0] += 1
        return hits

    type_get, code_get, alive_get = type_memo.get, code_memo.get, by_alive.get

    def scan(flow: FlowRecord, facts: FlowFacts) -> Sequence[tuple[int, Any]]:
        reported = 0  # rules that matched an earlier message
        first: list[tuple[int, Any]] | None = None
        for m in flow.dns:
            qname = m.qname
            if not qname:
                continue
            alive = type_get(m.qtype)
            if alive is None:
                alive = type_miss(m.qtype)
            if m.is_response:
                code = code_get(m.rcode)
                alive &= code_miss(m.rcode) if code is None else code
            else:
                alive &= query_alive
            if not alive:
                continue
            names = alive_get(alive)
            hits = None if names is None else names.get(qname)
            if hits is None:
                hits = name_miss(flow, m, alive)
            if hits:
                new = hits & ~reported
                if new:
                    reported |= new
                    if first is None:
                        first = []
                    first += [(i, m) for i in rule_indexes(new)]
        return sorted(first, key=_rule_index) if first else _NO_HITS

    return scan


class _Message:
    """The DNS message fields a part's getter reads (GETTERS: one expression per field, kept in one place)."""

    __slots__ = ("qname", "qtype", "rcode", "is_response")

    def __init__(self, qname: str = "", qtype: int = 0, rcode: int = 0, is_response: bool = False) -> None:
        self.qname, self.qtype, self.rcode, self.is_response = qname, qtype, rcode, is_response


def _rule_index(hit: tuple[int, Any]) -> int:
    return hit[0]
