"""The package layering, read from the imports of every module (statements anywhere, not only at the top).

The appliance and the concierge are two products in one repository: neither imports the other. Inside the
appliance, data flows one way (ingest -> flows -> analysis -> REST): detection never reaches up into the REST
layer, and flows never call back into ingest. An import that still breaks a rule would be listed in KNOWN_DEBT
(empty now); the list must shrink, never grow, and an entry whose import is gone must be deleted.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# (importing package, imported package prefix): a module under the first never imports the second.
FORBIDDEN = [
    ("appliance", "concierge"),
    ("agents", "concierge"),
    ("concierge", "appliance"),
    ("concierge", "agents"),
    ("appliance/detection", "appliance.rest"),
    ("appliance/detection", "appliance.dashboard"),
    ("appliance/flows", "appliance.ingest"),
    ("appliance/flows", "appliance.rest"),
    ("appliance/flows", "appliance.analysis"),
    # The analysis process is fed flow records; it never reaches into ingestion or the REST layer.
    ("appliance/analysis", "appliance.ingest"),
    ("appliance/analysis", "appliance.rest"),
    ("appliance/analysis", "appliance.dashboard"),
]

KNOWN_DEBT: set[tuple[str, str]] = set()


def imports_of(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def modules_under(package: str) -> list[Path]:
    return sorted(p for p in (ROOT / package).rglob("*.py") if "generated" not in p.parts)


def violations() -> set[tuple[str, str]]:
    found = set()
    for package, forbidden in FORBIDDEN:
        for path in modules_under(package):
            for name in imports_of(path):
                if name == forbidden or name.startswith(forbidden + "."):
                    found.add((str(path.relative_to(ROOT)), name))
    return found


@pytest.mark.parametrize("package,forbidden", FORBIDDEN)
def test_rule_covers_real_modules(package: str, forbidden: str) -> None:
    assert modules_under(package), f"{package} has no modules: the rule checks nothing"


def test_no_import_breaks_the_layering() -> None:
    assert violations() - KNOWN_DEBT == set()


def test_known_debt_is_still_real() -> None:
    assert KNOWN_DEBT <= violations(), "an import listed in KNOWN_DEBT is gone: delete its entry"
