"""SignatureEngine: the signatures layer, its rule set (swapped atomically) and the rule files.

A reload parses the whole directory; if any file is invalid the previous set keeps running and
`last_error` says why. A good reload replaces the set in one assignment, so `analyze` always sees
a whole set, never half of one.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable
from typing import Any

import yaml

from appliance.detection.analysis_config import AnalysisConfigHolder
from appliance.detection.detections import Throttle, make_detection, transport_name
from appliance.detection.domains import RegisteredDomains
from appliance.detection.facts import FlowFacts
from appliance.detection.signatures.fields import QTYPES, RCODES
from appliance.detection.signatures.rules import Rule, RuleError, load_directory, parse_rule, safe_load_bounded
from appliance.model import Detection, FlowRecord, Transport

log = logging.getLogger(__name__)

_ECHO = (0, 8)


Matcher = Callable[[dict[str, Any]], bool]


def compile_conditions(rule: Rule) -> Matcher:
    """One predicate for all of a rule's conditions (AND), built once per load: every flow runs it."""
    pairs = tuple((c.field, c.test) for c in rule.conditions)
    if len(pairs) == 1:
        ((field1, test1),) = pairs
        return lambda record: test1(record.get(field1, ""))
    if len(pairs) == 2:
        (field1, test1), (field2, test2) = pairs
        return lambda record: test1(record.get(field1, "")) and test2(record.get(field2, ""))

    def matches(record: dict[str, Any]) -> bool:
        for name, test in pairs:
            if not test(record.get(name, "")):
                return False
        return True

    return matches


@dataclass(frozen=True)
class RuleSet:
    rules: tuple[Rule, ...] = ()
    by_protocol: dict[str, tuple[tuple[Rule, Matcher], ...]] = field(default_factory=dict)
    loaded_at: float = 0.0

    @classmethod
    def of(cls, rules: list[Rule]) -> RuleSet:
        grouped: dict[str, list[tuple[Rule, Matcher]]] = {}
        for rule in rules:
            if rule.enabled:
                grouped.setdefault(rule.protocol, []).append((rule, compile_conditions(rule)))
        return cls(tuple(rules), {p: tuple(r) for p, r in grouped.items()}, time.time())


class SignatureEngine:
    """The signatures layer and the owner of the signatures directory."""

    name = "signatures"

    def __init__(self, directory: Path, config: AnalysisConfigHolder, facts: FlowFacts, domains: RegisteredDomains) -> None:
        self.directory = directory
        self._config = config
        self._facts = facts
        self._domains = domains
        self.ruleset = RuleSet()
        self.last_error: list[str] = []
        self.last_reload_at = 0.0
        self.reloads = 0
        self.reload_failures = 0
        self._write_lock = threading.Lock()
        self._throttle = Throttle()

    # -- rule set -------------------------------------------------------------------------------
    @property
    def loaded(self) -> int:
        return len(self.ruleset.rules)

    def reload(self) -> list[str]:
        """Re-read the directory; the problems (empty on success). A failed reload keeps the old set."""
        rules, errors = load_directory(self.directory)
        self.last_reload_at = time.time()
        if errors:
            self.reload_failures += 1
            self.last_error = errors
            log.warning("signature reload failed, keeping %d rules: %d problems: %s", len(self.ruleset.rules), len(errors),
                        "; ".join(errors[:10]))
            return errors
        self.ruleset = RuleSet.of(rules)
        self.last_error = []
        self.reloads += 1
        log.info("signatures loaded rules=%d enabled=%d dir=%s", len(rules),
                 sum(len(r) for r in self.ruleset.by_protocol.values()), self.directory)
        return []

    def get(self, rule_id: str) -> Rule | None:
        return next((r for r in self.ruleset.rules if r.id == rule_id), None)

    # -- rule files -----------------------------------------------------------------------------
    def validate(self, data: Any) -> Rule:
        """Validate one rule mapping against the schema and the other loaded rules; RuleError when invalid."""
        source = f"{data.get('id', '<rule>')}.yaml" if isinstance(data, dict) else "<rule>"
        rule, problems = parse_rule(data, source)
        if rule is None:
            raise RuleError(problems)
        return rule

    def save(self, data: Any) -> Rule:
        """Validate, write atomically (create or update), reload. Nothing is written when invalid."""
        rule = self.validate(data)
        with self._write_lock:
            existing = self.get(rule.id)
            name = existing.source if existing is not None else f"{rule.id}.yaml"
            self._write(name, rule.to_dict())
            problems = self.reload()
        if problems:
            raise RuleError(problems)
        return self.get(rule.id) or rule

    def toggle(self, rule_id: str, enabled: bool | None = None) -> Rule | None:
        """Flip (or set) `enabled` in the rule's file and reload; None when no such rule."""
        with self._write_lock:
            rule = self.get(rule_id)
            if rule is None:
                return None
            path = self.directory / rule.source
            data = safe_load_bounded(path.read_text(encoding="utf-8"))
            data["enabled"] = (not rule.enabled) if enabled is None else enabled
            self._write(rule.source, data)
            problems = self.reload()
        if problems:
            raise RuleError(problems)
        return self.get(rule_id)

    def _write(self, name: str, data: dict[str, Any]) -> None:
        target = (self.directory / name).resolve()
        if target.parent != self.directory.resolve():
            raise RuleError([f"{name}: id: would be written outside the signatures directory"])
        self.directory.mkdir(parents=True, exist_ok=True)
        text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=self.directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    # -- analysis -------------------------------------------------------------------------------
    def analyze(self, flow: FlowRecord) -> list[Detection]:
        by_protocol = self.ruleset.by_protocol
        if not by_protocol:
            return []
        out: list[Detection] = []
        base: dict[str, Any] | None = None
        for protocol in self._protocols(flow):
            rules = by_protocol.get(protocol)
            if not rules:
                continue
            if base is None:
                base = {"transport": transport_name(flow), "remote_ip": flow.remote_addr, "remote_port": flow.remote_port,
                        "bytes_out": flow.bytes_out, "bytes_in": flow.bytes_in, "duration_s": flow.duration_s,
                        "process_name": flow.process_name.lower()}
            records = self._records(flow, protocol, base)
            if not records:
                continue
            for rule, matches in rules:
                for record in records:
                    if matches(record):
                        detection = self._detection(flow, rule, record)
                        if detection is not None:
                            out.append(detection)
                        break
        return out

    @staticmethod
    def _protocols(flow: FlowRecord) -> tuple[str, ...]:
        transport = flow.transport
        if transport is Transport.UDP:
            return ("dns", "udp") if flow.dns else ("udp",)
        if transport is Transport.TCP:
            return ("tcp", "tls", "http", "dns") if flow.dns else ("tcp", "tls", "http")
        if transport is Transport.ICMP:
            return ("icmp",)
        return ()

    def _records(self, flow: FlowRecord, protocol: str, base: dict[str, Any]) -> list[dict[str, Any]]:
        if protocol in ("tcp", "udp"):
            return [base]
        if protocol == "dns":
            return [{**base, "dns.qname": m.qname, "dns.qname_length": len(m.qname),
                     "dns.qtype": QTYPES.get(m.qtype, str(m.qtype)).lower(),
                     "dns.rcode": RCODES.get(m.rcode, str(m.rcode)).lower() if m.is_response else ""}
                    for m in flow.dns if m.qname]
        if protocol == "icmp":
            return [{**base, "icmp.type": p.icmp.type, "icmp.payload_size": max(len(p.icmp.data) - 4, 0)}
                    for p in flow.samples if p.icmp is not None and p.icmp.type in _ECHO]
        facts = self._facts.facts(flow)
        if protocol == "tls":
            hello = facts.client_hello
            if hello is None:
                return []
            return [{**base, "tls.sni": hello.sni, "tls.version": hello.version.lower()}]
        return [{**base, "http.method": r.method.lower(), "http.host": r.host, "http.uri": r.uri.lower(),
                 "http.user_agent": r.user_agent.lower(), "http.content_length": r.content_length}
                for r in facts.http_requests]

    def _detection(self, flow: FlowRecord, rule: Rule, record: dict[str, Any]) -> Detection | None:
        domain = ""
        if rule.protocol == "dns":
            domain = self._domains.registered(record["dns.qname"])
        elif rule.protocol == "tls":
            domain = record.get("tls.sni", "")
        elif rule.protocol == "http":
            domain = record.get("http.host", "")
        indicator = domain if rule.protocol == "dns" and domain else flow.remote_addr
        if not self._throttle.allow((rule.id, flow.agent_id, indicator), flow.last_ns,
                                    self._config.current.detectors.report_interval_s):
            return None
        matched = {c.field: record.get(c.field) for c in rule.conditions}
        return make_detection(
            f"signature:{rule.id}", rule.category, rule.confidence, rule.severity, agent_id=flow.agent_id,
            indicator=indicator, protocol=rule.protocol, transport=transport_name(flow),
            evidence={"rule": rule.id, "title": rule.title, "matched": matched, "reason": f"rule {rule.id}: {rule.title}"},
            flow_ids=[flow.flow_id], first_ns=flow.first_ns, last_ns=flow.last_ns, remote_ip=flow.remote_addr,
            domain=domain)
