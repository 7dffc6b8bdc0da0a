"""Rule model and validation: YAML parsed once (`yaml.safe_load`), every error found in one pass.

Each error names the rule file, the field and the reason. A rule file holds one rule.
"""

from __future__ import annotations

import re
import reprlib
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from pathlib import Path
from typing import Any

import yaml

from appliance.detection.signatures.fields import FIELDS, PROTOCOLS
from appliance.detection.signatures.operators import OPERATORS, OperatorValueError
from appliance.errors import ApplianceError
from appliance.model import Category, Severity

RULE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
KEYS = ("id", "title", "description", "protocol", "category", "severity", "confidence", "enabled", "conditions")
REQUIRED = ("id", "title", "description", "protocol", "category", "severity", "confidence", "conditions")
CONDITION_KEYS = ("field", "op", "value")
SUFFIXES = (".yaml", ".yml")

# Bounds of the rule loader. A rule is a few hundred bytes; YAML aliases let a 369-byte file stand
# for millions of nodes (an "alias bomb"), harmless while shared but exponential once printed in
# an error. So: files are capped in size, a document's nodes are counted with every alias
# expanded, and values shown in errors are cut.
MAX_RULE_FILE_BYTES = 64 * 1024
MAX_EXPANDED_NODES = 10_000
MAX_PROBLEM_CHARS = 300
_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxother, _SHOWN.maxlist, _SHOWN.maxdict = 2, 60, 60, 5, 5


def shown(value: Any) -> str:
    """A value as an error message shows it: its repr, bounded whatever its size or depth."""
    return _SHOWN.repr(value)


class RuleError(ApplianceError):
    """One or more rules are invalid; `problems` lists each as "file: field: reason"."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class Condition:
    field: str
    op: str
    value: Any
    test: Callable[[Any], bool] = dataclass_field(compare=False, repr=False)


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    description: str
    protocol: str
    category: Category
    severity: Severity
    confidence: float
    enabled: bool
    conditions: tuple[Condition, ...]
    source: str = ""  # file name inside the signatures directory

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "description": self.description, "protocol": self.protocol,
                "category": self.category.value, "severity": self.severity.label, "confidence": self.confidence,
                "enabled": self.enabled,
                "conditions": [{"field": c.field, "op": c.op, "value": c.value} for c in self.conditions]}


def parse_rule(data: Any, source: str) -> tuple[Rule | None, list[str]]:
    """Validate one rule mapping; the rule, or None and every problem found."""
    if not isinstance(data, dict):
        return None, [f"{source}: <root>: a rule must be a mapping (got {type(data).__name__})"]
    errors: list[str] = []

    def bad(name: str, reason: str) -> None:
        errors.append(_cut(f"{source}: {name}: {reason}"))

    for key in data:
        if key not in KEYS:
            bad(str(key), f"unknown field (allowed: {', '.join(KEYS)})")
    for key in REQUIRED:
        if key not in data:
            bad(key, "is required")
    rule_id = data.get("id")
    if "id" in data and not (isinstance(rule_id, str) and RULE_ID.match(rule_id)):
        bad("id", f"must be 1-64 letters, digits, '.', '_' or '-' starting with a letter or digit (got {shown(rule_id)})")
    for key in ("title", "description"):
        if key in data and not (isinstance(data[key], str) and data[key].strip()):
            bad(key, f"must be a non-empty string (got {shown(data[key])})")
    protocol = data.get("protocol")
    if "protocol" in data and protocol not in PROTOCOLS:
        bad("protocol", f"must be one of {', '.join(PROTOCOLS)} (got {shown(protocol)})")
    category = None
    if "category" in data:
        try:
            category = Category(data["category"])
        except ValueError:
            bad("category", f"must be one of {', '.join(c.value for c in Category)} (got {shown(data['category'])})")
    severity = None
    if "severity" in data:
        try:
            severity = Severity.parse(str(data["severity"])) if isinstance(data["severity"], str) else None
        except ValueError:
            severity = None
        if severity is None:
            bad("severity", f"must be one of Low, Medium, High, Critical (got {shown(data['severity'])})")
    confidence = data.get("confidence")
    if "confidence" in data and not (isinstance(confidence, (int, float)) and not isinstance(confidence, bool)
                                     and 0.0 <= confidence <= 1.0):
        bad("confidence", f"must be a number from 0.0 to 1.0 (got {shown(confidence)})")
    enabled = data.get("enabled", True)
    if not isinstance(enabled, bool):
        bad("enabled", f"must be true or false (got {shown(enabled)})")
    conditions: list[Condition] = []
    raw_conditions = data.get("conditions")
    if "conditions" in data:
        if not isinstance(raw_conditions, list) or not raw_conditions:
            bad("conditions", "must be a non-empty list of {field, op, value}")
        else:
            for i, raw in enumerate(raw_conditions):
                where = f"conditions[{i}]"
                if not isinstance(raw, dict):
                    bad(where, f"must be a mapping with field, op and value (got {type(raw).__name__})")
                    continue
                for key in raw:
                    if key not in CONDITION_KEYS:
                        bad(f"{where}.{key}", "unknown field (allowed: field, op, value)")
                for key in CONDITION_KEYS:
                    if key not in raw:
                        bad(f"{where}.{key}", "is required")
                name, op_name = raw.get("field"), raw.get("op")
                spec = FIELDS.get(name) if isinstance(name, str) else None
                if "field" in raw and spec is None:
                    bad(f"{where}.field", f"unknown field {shown(name)} (known: {', '.join(FIELDS)})")
                elif spec is not None and protocol in PROTOCOLS and protocol not in spec.protocols:
                    bad(f"{where}.field", f"{name} does not exist in {protocol} rules (only {', '.join(sorted(spec.protocols))})")
                operator = OPERATORS.get(op_name) if isinstance(op_name, str) else None
                if "op" in raw and operator is None:
                    bad(f"{where}.op", f"unknown operator {shown(op_name)} (known: {', '.join(OPERATORS)})")
                elif operator is not None and spec is not None and spec.kind not in operator.kinds:
                    bad(f"{where}.op", f"{op_name} does not apply to {spec.kind} field {name}")
                elif operator is not None and spec is not None and "value" in raw:
                    try:
                        test = operator.build(raw["value"], spec.kind)
                        conditions.append(Condition(name, op_name, raw["value"], test))  # type: ignore[arg-type]
                    except OperatorValueError as err:
                        bad(f"{where}.value", str(err))
    if errors:
        return None, errors
    return Rule(rule_id, data["title"].strip(), data["description"].strip(), protocol, category,  # type: ignore[arg-type]
                severity, float(confidence), enabled, tuple(conditions), source), []  # type: ignore[arg-type]


def _cut(problem: str) -> str:
    return problem if len(problem) <= MAX_PROBLEM_CHARS else problem[: MAX_PROBLEM_CHARS - 1] + "…"


class _ExpansionTooLarge(Exception):
    """The document stands for more nodes than MAX_EXPANDED_NODES once its aliases are expanded."""


def _expanded_size(node: yaml.Node, sizes: dict[int, int], open_nodes: set[int]) -> int:
    """Nodes under `node` with every alias expanded (memoised per node, so linear in the document)."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_nodes:  # an alias to an enclosing node: an infinite structure
        raise _ExpansionTooLarge
    open_nodes.add(key)
    total = 1
    if isinstance(node, yaml.SequenceNode):
        children: list[yaml.Node] = list(node.value)
    elif isinstance(node, yaml.MappingNode):
        children = [part for pair in node.value for part in pair]
    else:
        children = []
    for child in children:
        total += _expanded_size(child, sizes, open_nodes)
        if total > MAX_EXPANDED_NODES:
            raise _ExpansionTooLarge
    open_nodes.discard(key)
    sizes[key] = total
    return total


def safe_load_bounded(text: str) -> Any:
    """`yaml.safe_load` of one document, refused (ValueError) when it is too large or aliases expand too far."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_RULE_FILE_BYTES:
        raise ValueError(f"larger than {MAX_RULE_FILE_BYTES} bytes")
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        try:
            _expanded_size(node, {}, set())
        except _ExpansionTooLarge:
            raise ValueError(f"more than {MAX_EXPANDED_NODES} nodes once aliases are expanded (alias bomb?)") from None
        return loader.construct_document(node)
    finally:
        loader.dispose()


def parse_text(text: str, source: str) -> tuple[Rule | None, list[str]]:
    try:
        data = safe_load_bounded(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "<yaml>"
        return None, [_cut(f"{source}: {where}: not valid YAML: {getattr(err, 'problem', None) or err}")]
    except ValueError as err:
        return None, [_cut(f"{source}: <file>: {err}")]
    return parse_rule(data, source)


def load_directory(directory: Path) -> tuple[list[Rule], list[str]]:
    """Every rule file in `directory` (hidden files skipped); the rules and every problem found."""
    rules: list[Rule] = []
    errors: list[str] = []
    seen: dict[str, str] = {}
    if not directory.is_dir():
        return rules, errors
    for path in sorted(directory.iterdir()):
        if path.name.startswith(".") or path.suffix not in SUFFIXES or not path.is_file():
            continue
        try:
            if path.stat().st_size > MAX_RULE_FILE_BYTES:
                errors.append(_cut(f"{path.name}: <file>: larger than {MAX_RULE_FILE_BYTES} bytes"))
                continue
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            errors.append(_cut(f"{path.name}: <file>: cannot read: {err}"))
            continue
        rule, problems = parse_text(text, path.name)
        errors.extend(problems)
        if rule is not None:
            if rule.id in seen:
                errors.append(f"{path.name}: id: duplicate rule id {rule.id!r} (also in {seen[rule.id]})")
                continue
            seen[rule.id] = path.name
            rules.append(rule)
    return rules, errors
