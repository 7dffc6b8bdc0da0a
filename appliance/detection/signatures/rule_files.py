"""The rule files: validate one rule, write it atomically into the signatures directory, reload the engine.

The engine (the analysis layer) only reads the directory; everything that changes a file is here, serialised
by one lock, and ends with a reload so that the layer and the files never disagree for longer than a write.
"""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path
from typing import Any

import yaml

from appliance.detection.signatures.engine import SignatureEngine
from appliance.detection.signatures.rules import Rule, RuleError, RuleProblem, parse_rule, safe_load_bounded


class RuleFiles:
    """Creates, updates and toggles rules in `engine.directory`; a rule that does not validate writes nothing."""

    def __init__(self, engine: SignatureEngine) -> None:
        self.engine = engine
        self.directory = engine.directory
        self._write_lock = threading.Lock()

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
            existing = self.engine.get(rule.id)
            name = existing.source if existing is not None else f"{rule.id}.yaml"
            self._write(name, rule.to_dict())
            problems = self.engine.reload()
        if problems:
            raise RuleError(problems)
        return self.engine.get(rule.id) or rule

    def toggle(self, rule_id: str, enabled: bool | None = None) -> Rule | None:
        """Flip (or set) `enabled` in the rule's file and reload; None when no such rule."""
        with self._write_lock:
            rule = self.engine.get(rule_id)
            if rule is None:
                return None
            path = self.directory / rule.source
            data = safe_load_bounded(path.read_text(encoding="utf-8"))
            data["enabled"] = (not rule.enabled) if enabled is None else enabled
            self._write(rule.source, data)
            problems = self.engine.reload()
        if problems:
            raise RuleError(problems)
        return self.engine.get(rule_id)

    def _write(self, name: str, data: dict[str, Any]) -> None:
        target = (self.directory / name).resolve()
        if target.parent != self.directory.resolve():
            raise RuleError([RuleProblem(name, "id", "would be written outside the signatures directory")])
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
