"""SignatureEngine: the signatures layer and its rule set (swapped atomically); rule_files.py writes the files.

A reload parses the whole directory; if any file is invalid the previous set keeps running and
`last_error` says why. A good reload replaces the set in one assignment, so `analyze` always sees
a whole set, never half of one.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable
from typing import Any

from appliance.detection.analysis_config_holder import AnalysisConfigHolder
from appliance.detection.detections import Throttle, make_detection, transport_name
from appliance.detection.domains import RegisteredDomains
from appliance.detection.facts import FlowFacts
from appliance.detection.signatures.matcher import FlowBinder, FlowsAnalysis, ItemMatcher, Scan, compile_flows, compile_lazy, compile_scan, record_of
from appliance.detection.signatures.rules import Rule, RuleProblem, load_directory
from appliance.model import Detection, FlowRecord, Transport

log = logging.getLogger(__name__)

# The rule protocols a flow can match, in the order detections are reported: by transport, and whether
# the flow carried DNS messages.
FLOW_PROTOCOLS: dict[tuple[Transport, bool], tuple[str, ...]] = {
    (Transport.UDP, True): ("dns", "udp"), (Transport.UDP, False): ("udp",),
    (Transport.TCP, True): ("tcp", "tls", "http", "dns"), (Transport.TCP, False): ("tcp", "tls", "http"),
    (Transport.ICMP, True): ("icmp",), (Transport.ICMP, False): ("icmp",),
}


@dataclass(frozen=True)
class ProtocolRules:
    """One protocol's enabled rules, their compiled matcher of one item and scan of a flow."""

    protocol: str
    rules: tuple[Rule, ...]
    match: ItemMatcher
    scan: Scan

    @classmethod
    def of(cls, protocol: str, rules: tuple[Rule, ...]) -> ProtocolRules:
        match = compile_lazy(rules)
        return cls(protocol, rules, match, compile_scan(protocol, rules, match))


@dataclass(frozen=True)
class Plan:
    """What a kind of flow is matched against: its protocols' rules, in order."""

    protocols: tuple[ProtocolRules, ...]


_NO_PLANS = compile_flows({})


@dataclass(frozen=True)
class RuleSet:
    rules: tuple[Rule, ...] = ()
    by_protocol: dict[str, ProtocolRules] = field(default_factory=dict)
    # (transport, has DNS) -> the protocols with rules a flow of that kind is matched against, in order
    plans: dict[tuple[Transport, bool], Plan] = field(default_factory=dict)
    loaded_at: float = 0.0
    # The plans as one generated function (matcher.compile_flows), bound by each engine to its facts and detections.
    bind: FlowBinder = _NO_PLANS

    @classmethod
    def of(cls, rules: list[Rule]) -> RuleSet:
        grouped: dict[str, list[Rule]] = {}
        for rule in rules:
            if rule.enabled:
                grouped.setdefault(rule.protocol, []).append(rule)
        by_protocol = {p: ProtocolRules.of(p, tuple(r)) for p, r in grouped.items()}
        plans = {kind: Plan(tuple(by_protocol[p] for p in protocols if p in by_protocol))
                 for kind, protocols in FLOW_PROTOCOLS.items()}
        plans = {kind: plan for kind, plan in plans.items() if plan.protocols}
        bind = compile_flows({kind: (plan, [(p.protocol, p.rules, p.match, p.scan) for p in plan.protocols])
                              for kind, plan in plans.items()})
        return cls(tuple(rules), by_protocol, plans, time.time(), bind)


class SignatureEngine:
    """The signatures layer: the rule set read from the signatures directory, and its matching."""

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
        self._throttle = Throttle()

    # `analyze(flow)` -> the flow's detections: the rule set's generated function itself (RuleSet.bind), bound to
    # this engine's facts and detections whenever the set is swapped, so the pipeline's call per flow goes
    # straight to it (a method around it cost one more call, ~60 ns of the ~0.5 us a TLS flow costs here).
    # Each function holds one whole set: a flow is matched against the old set or the new one, never half.
    analyze: Callable[[FlowRecord], list[Detection]]
    # `analyze_many(flows, failed=None)` -> [(index, detections)] (AnalysisLayer.analyze_many): the same body in a loop.
    analyze_many: FlowsAnalysis

    @property
    def ruleset(self) -> RuleSet:
        return self._ruleset

    @ruleset.setter
    def ruleset(self, ruleset: RuleSet) -> None:
        self._ruleset = ruleset
        self._bind(ruleset)

    def _bind(self, ruleset: RuleSet) -> None:
        self.analyze, self.analyze_many = ruleset.bind(self._facts, self._detections)

    # -- rule set -------------------------------------------------------------------------------
    @property
    def loaded(self) -> int:
        return len(self.ruleset.rules)

    def reload(self) -> list[RuleProblem]:
        """Re-read the directory; the problems (empty on success). A failed reload keeps the old set."""
        rules, errors = load_directory(self.directory)
        self.last_reload_at = time.time()
        if errors:
            self.reload_failures += 1
            self.last_error = [str(p) for p in errors]
            log.warning("signature reload failed, keeping %d rules: %d problems: %s", len(self.ruleset.rules), len(errors),
                        "; ".join(self.last_error[:10]))
            return errors
        self.ruleset = RuleSet.of(rules)
        self.last_error = []
        self.reloads += 1
        log.info("signatures loaded rules=%d enabled=%d dir=%s", len(rules),
                 sum(len(p.rules) for p in self.ruleset.by_protocol.values()), self.directory)
        return []

    def get(self, rule_id: str) -> Rule | None:
        return next((r for r in self.ruleset.rules if r.id == rule_id), None)

    # -- analysis -------------------------------------------------------------------------------
    def _detections(self, flow: FlowRecord, plan: Plan, hits: list[tuple[int, int, Any]]) -> list[Detection]:
        """The detections of a flow's hits, (step, rule index, item) each: each rule reports its first matching item."""
        out: list[Detection] = []
        for step, i, item in hits:
            rule = plan.protocols[step].rules[i]
            detection = self._detection(flow, rule, record_of(rule, flow, item))
            if detection is not None:
                out.append(detection)
        return out

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
