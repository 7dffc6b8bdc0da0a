"""The signature engine's matching as it was before lazy matching (matcher.py): the reference the tests hold
the engine to. Every record of a flow is built as a dict of every field of its protocol, then one generated
function per protocol tests every rule on it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from appliance.detection.detections import transport_name
from appliance.detection.signatures.engine import FLOW_PROTOCOLS, RuleSet, SignatureEngine
from appliance.detection.signatures.fields import QTYPES, RCODES
from appliance.detection.signatures.rules import Rule
from appliance.model import Detection, FlowRecord

_ECHO = (0, 8)
_QTYPE_TEXT = {code: name.lower() for code, name in QTYPES.items()}
_RCODE_TEXT = {code: name.lower() for code, name in RCODES.items()}

ProtocolMatcher = Callable[[dict[str, Any]], list[int]]


def compile_protocol(rules: tuple[Rule, ...]) -> ProtocolMatcher:
    """One function for all of one protocol's rules: each field the rules read is fetched from the record
    once, then each rule's conditions are tested in order (AND); a missing field reads as ""."""
    fields: list[str] = []
    for rule in rules:
        for condition in rule.conditions:
            if condition.field not in fields:
                fields.append(condition.field)
    tests = tuple(c.test for rule in rules for c in rule.conditions)
    lines = ["def match(record):", "    get = record.get", "    hits = []"]
    lines += [f"    v{i} = get(F[{i}], '')" for i in range(len(fields))]
    position = 0
    for index, rule in enumerate(rules):
        checks = []
        for condition in rule.conditions:
            checks.append(f"T[{position}](v{fields.index(condition.field)})")
            position += 1
        lines.append(f"    if {' and '.join(checks) or 'True'}:")
        lines.append(f"        hits.append({index})")
    lines.append("    return hits")
    namespace: dict[str, Any] = {"F": tuple(fields), "T": tests}
    exec(compile("\n".join(lines), "<signature rules>", "exec"), namespace)  # noqa: S102 - indexes only
    return namespace["match"]  # type: ignore[no-any-return]


def records(engine: SignatureEngine, flow: FlowRecord, protocol: str, base: dict[str, Any]) -> list[dict[str, Any]]:
    if protocol in ("tcp", "udp"):
        return [base]
    if protocol == "dns":
        return [{**base, "dns.qname": m.qname, "dns.qname_length": len(m.qname),
                 "dns.qtype": _QTYPE_TEXT.get(m.qtype) or str(m.qtype),
                 "dns.rcode": (_RCODE_TEXT.get(m.rcode) or str(m.rcode)) if m.is_response else ""}
                for m in flow.dns if m.qname]
    if protocol == "icmp":
        return [{**base, "icmp.type": p.icmp.type, "icmp.payload_size": max(len(p.icmp.data) - 4, 0)}
                for p in flow.samples if p.icmp is not None and p.icmp.type in _ECHO]
    facts = engine._facts.facts(flow)
    if protocol == "tls":
        tls = facts.tls
        hello = facts.client_hello
        if tls is None or hello is None:
            return []
        leaf = tls.certificates[0] if tls.certificates else None
        return [{**base, "tls.sni": tls.sni, "tls.version": hello.version.lower(),
                 "tls.ja4": tls.ja4, "tls.ja4s": tls.ja4s, "tls.ja3": tls.ja3, "tls.alpn": tls.alpn.lower(),
                 "tls.cert.subject": leaf.subject.lower() if leaf else "", "tls.cert.issuer": leaf.issuer.lower() if leaf else "",
                 "tls.cert.self_signed": int(leaf.self_signed) if leaf else 0,
                 "tls.cert.validity_days": int(leaf.validity_days) if leaf else 0,
                 "tls.cert.key_bits": leaf.key_bits if leaf else 0}]
    return [{**base, "http.method": r.method.lower(), "http.host": r.host, "http.uri": r.uri.lower(),
             "http.user_agent": r.user_agent.lower(), "http.content_length": r.content_length}
            for r in facts.http_requests]


class ReferenceEngine(SignatureEngine):
    """A SignatureEngine (same loading, throttle and detections) whose `analyze` matches the old way."""

    _compiled_for: object = None
    _compiled: dict[str, tuple[tuple[Rule, ...], ProtocolMatcher]] = {}

    def _bind(self, ruleset: RuleSet) -> None:
        pass  # the method below stays the engine's analyze (the engine binds the generated one instead)

    def analyze(self, flow: FlowRecord) -> list[Detection]:
        if self._compiled_for is not self.ruleset:  # a reload swapped the set: compile the new one
            grouped: dict[str, list[Rule]] = {}
            for rule in self.ruleset.rules:
                if rule.enabled:
                    grouped.setdefault(rule.protocol, []).append(rule)
            self._compiled = {p: (tuple(r), compile_protocol(tuple(r))) for p, r in grouped.items()}
            self._compiled_for = self.ruleset
        out: list[Detection] = []
        base: dict[str, Any] | None = None
        for protocol in FLOW_PROTOCOLS.get((flow.transport, bool(flow.dns)), ()):
            compiled = self._compiled.get(protocol)
            if compiled is None:
                continue
            if base is None:
                base = {"transport": transport_name(flow), "remote_ip": flow.remote_addr, "remote_port": flow.remote_port,
                        "bytes_out": flow.bytes_out, "bytes_in": flow.bytes_in, "duration_s": flow.duration_s,
                        "process_name": flow.process_name.lower()}
            found = records(self, flow, protocol, base)
            if not found:
                continue
            rules, match = compiled
            first: dict[int, dict[str, Any]] = {}
            for record in found:
                for i in match(record):
                    first.setdefault(i, record)
            for i, record in sorted(first.items(), key=lambda hit: hit[0]):
                detection = self._detection(flow, rules[i], record)
                if detection is not None:
                    out.append(detection)
        return out
