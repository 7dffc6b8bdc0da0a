"""Enrollment script rendering: template files with placeholders, every value validated and quoted.

Templates live in `installer/` as real script files. A placeholder is written `'{{NAME}}'` and
must sit inside single quotes in the template (the renderer refuses a template where one does
not), so a value can only ever be a string literal. Each value is first checked against the
pattern of its slot (SLOTS), then escaped for the target language's single-quoted string. A
template that names an unknown slot, or a render that leaves one unfilled, is an error.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from appliance.errors import ApplianceError

_PLACEHOLDER = re.compile(r"\{\{([A-Z][A-Z0-9_]*)\}\}")
_QUOTED_PLACEHOLDER = re.compile(r"'\{\{([A-Z][A-Z0-9_]*)\}\}'")
_DNS_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")
_PATH = re.compile(r"^(/[A-Za-z0-9._~-]+)*/?$")


class TemplateError(ApplianceError):
    """An enrollment template is malformed or a value does not fit its slot."""


def is_host(value: str) -> bool:
    """A DNS name or an IP address literal."""
    try:
        ipaddress.ip_address(value)
        return True
    except ValueError:
        pass
    return 0 < len(value) <= 253 and all(_DNS_LABEL.match(label) for label in value.rstrip(".").split("."))


def _url(value: str) -> bool:
    parts = urlsplit(value)
    host = parts.hostname or ""
    try:
        port_ok = parts.port is None or 0 < parts.port < 65536
    except ValueError:
        return False
    return (parts.scheme in ("https", "http") and is_host(host) and port_ok and not parts.username
            and not parts.password and not parts.query and not parts.fragment and bool(_PATH.match(parts.path))
            and value == value.strip() and "'" not in value and "\\" not in value)


def _regex(pattern: str) -> Callable[[str], bool]:
    compiled = re.compile(pattern)
    return lambda value: bool(compiled.fullmatch(value))


# Every slot a template may use, and what its value must look like.
SLOTS: dict[str, Callable[[str], bool]] = {
    "PRODUCT": _regex(r"[A-Za-z][A-Za-z0-9_-]{0,63}"),
    "BASE_URL": _url,
    "TARGET_URL": _url,
    "SERVER_NAME": is_host,
    "SERVER_SHA256": _regex(r"[0-9a-f]{64}"),
    "SERVER_SPKI_SHA256": _regex(r"[A-Za-z0-9+/]{43}="),
    "CA_PEM_B64": _regex(r"[A-Za-z0-9+/]+={0,2}"),
    "CERT_PEM_B64": _regex(r"[A-Za-z0-9+/]+={0,2}"),
    "KEY_PEM_B64": _regex(r"[A-Za-z0-9+/]+={0,2}"),
    "TOKEN_PREFIX": _regex(r"[0-9a-f]{6}"),
    "OS_KIND": _regex(r"linux|macos|windows"),
    "HAS_DRIVER": _regex(r"true|false"),
    "AGENT_PATHS": _regex(r"[A-Za-z0-9._/-]+( [A-Za-z0-9._/-]+)*"),
    "PAYLOAD_SHA256": _regex(r"[A-Za-z0-9._/-]+=[0-9a-f]{64}( [A-Za-z0-9._/-]+=[0-9a-f]{64})*"),
    "GENERATED_AT": _regex(r"[0-9TZ:.+-]{10,40}"),
}


def quote_powershell(value: str) -> str:
    """Inner text of a PowerShell single-quoted string (PowerShell also treats U+2018-U+201B as quotes)."""
    return re.sub("['\u2018\u2019\u201a\u201b]", lambda m: m.group(0) * 2, value)


def quote_sh(value: str) -> str:
    """Inner text of a POSIX sh single-quoted string."""
    return value.replace("'", "'\\''")


@dataclass(frozen=True)
class Template:
    """One script template and the quoting of its language."""

    name: str
    text: str
    quote: Callable[[str], str]

    @classmethod
    def load(cls, path: Path, quote: Callable[[str], str]) -> Template:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as err:
            raise TemplateError(f"{path}: cannot read enrollment template: {err.strerror}") from None
        problems = []
        for match in _PLACEHOLDER.finditer(text):
            if match.group(1) not in SLOTS:
                problems.append(f"unknown slot {match.group(1)}")
        if len(_PLACEHOLDER.findall(text)) != len(_QUOTED_PLACEHOLDER.findall(text)):
            problems.append("every placeholder must be written '{{NAME}}' inside single quotes")
        if problems:
            raise TemplateError(f"{path}: " + "; ".join(problems))
        return cls(path.name, text, quote)

    def slots(self) -> set[str]:
        return set(_PLACEHOLDER.findall(self.text))

    def render(self, values: dict[str, str]) -> str:
        missing = self.slots() - values.keys()
        if missing:
            raise TemplateError(f"{self.name}: no value for {', '.join(sorted(missing))}")
        for name in self.slots():
            if not SLOTS[name](values[name]):
                raise TemplateError(f"{self.name}: value for {name} does not fit the slot: {values[name][:60]!r}")
        return _QUOTED_PLACEHOLDER.sub(lambda m: "'" + self.quote(values[m.group(1)]) + "'", self.text)
