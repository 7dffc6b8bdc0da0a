"""Exclusions (the whitelist): values whose detections are dropped before correlation.

An entry has a value (an IPv4/IPv6 address, a CIDR, or a domain), a protocol scope and an optional
agent scope. A domain entry covers the domain and every subdomain (`example.com` covers
`a.b.example.com`, not `badexample.com`). The scope matches a detection's application protocol
(dns, http, tls, icmp) or its transport (tcp, udp, icmp); `any` matches all. So a dns-scoped
`example.com` drops DNS detections about example.com but not TLS detections toward it, and a
tcp-scoped address covers TLS and HTTP detections to it. Changes apply to the next detection.

A blanket entry (`0.0.0.0/0`, `::/0`, any network wider than an IPv4 /8 or an IPv6 /7, or a public
suffix such as `co.uk`) switches detection off for a large part of the world at once, so it is
refused unless the caller confirms it, and while one is active it is reported as a warning.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass

from publicsuffixlist import PublicSuffixList

from appliance.detection.database import DetectionDatabase
from appliance.model import Detection

SCOPES = ("dns", "http", "tls", "icmp", "tcp", "udp", "any")
_DOMAIN = re.compile(r"^(?=.{1,253}$)([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\.)*[a-z0-9_]([a-z0-9-]{0,61}[a-z0-9])?$")


log = logging.getLogger(__name__)

# Networks wider than these (shorter prefixes) are blanket: 10.0.0.0/8 and fc00::/7 are ordinary.
BLANKET_PREFIX = {4: 8, 6: 7}


class BlanketExclusion(ValueError):
    """A blanket exclusion was requested without `confirm_blanket`."""


@dataclass(frozen=True, slots=True)
class Exclusion:
    id: str
    value: str
    kind: str  # ip | cidr | domain
    protocol: str
    agent_id: str | None
    comment: str
    created_at: float


def is_blanket(kind: str, value: str, suffixes: PublicSuffixList) -> bool:
    """Whether an entry covers a large part of the world (see the module docstring)."""
    if kind == "cidr":
        net = ipaddress.ip_network(value)
        return net.prefixlen < BLANKET_PREFIX[net.version]
    if kind == "domain":
        return bool(suffixes.is_public(value))
    return False


def classify(value: str) -> tuple[str, str]:
    """(kind, normalised value); ValueError naming what is wrong."""
    text = value.strip().lower().rstrip(".")
    if not text:
        raise ValueError("must not be empty")
    if "/" in text:
        try:
            return "cidr", str(ipaddress.ip_network(text, strict=False))
        except ValueError:
            raise ValueError(f"{value!r} is not a valid CIDR") from None
    try:
        return "ip", str(ipaddress.ip_address(text))
    except ValueError:
        pass
    if _DOMAIN.match(text) and "." in text:
        return "domain", text
    raise ValueError(f"{value!r} is neither an IP address, a CIDR nor a domain name")


class _Compiled:
    """An immutable, fast matcher over one snapshot of the entries."""

    def __init__(self, entries: list[Exclusion]) -> None:
        self.entries = entries
        self.ips: dict[str, list[Exclusion]] = {}
        self.nets: list[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, Exclusion]] = []
        self.domains: dict[str, list[Exclusion]] = {}
        for e in entries:
            if e.kind == "ip":
                self.ips.setdefault(e.value, []).append(e)
            elif e.kind == "cidr":
                self.nets.append((ipaddress.ip_network(e.value), e))
            else:
                self.domains.setdefault(e.value, []).append(e)

    @staticmethod
    def _applies(e: Exclusion, d: Detection, protocol: str, transport: str) -> bool:
        return (e.protocol == "any" or e.protocol == protocol or e.protocol == transport) and \
            (e.agent_id is None or e.agent_id == d.agent_id)

    def excluded(self, d: Detection) -> bool:
        ev = d.evidence
        protocol, transport = ev.get("protocol", ""), ev.get("transport", "")
        addresses = {a for a in (ev.get("remote_ip") or "", d.indicator) if a}
        for address in addresses:
            for e in self.ips.get(address, ()):
                if self._applies(e, d, protocol, transport):
                    return True
            if self.nets:
                try:
                    ip = ipaddress.ip_address(address)
                except ValueError:
                    continue
                for net, e in self.nets:
                    if ip in net and self._applies(e, d, protocol, transport):
                        return True
        if self.domains:
            for name in {n for n in (ev.get("domain") or "", d.indicator) if n}:
                labels = name.lower().split(".")
                for i in range(len(labels) - 1):
                    for e in self.domains.get(".".join(labels[i:]), ()):
                        if self._applies(e, d, protocol, transport):
                            return True
        return False


class ExclusionStore:
    """Persists entries in SQLite and serves the current matcher (swapped atomically on change)."""

    def __init__(self, db: DetectionDatabase) -> None:
        self._db = db
        self._suffixes = PublicSuffixList(accept_unknown=False)
        self._compiled = _Compiled(self._load())
        self._listeners: list[Callable[[], None]] = []

    def reload(self) -> None:
        """Read the stored exclusions again (the analysis process, after a REST change)."""
        self._compiled = _Compiled(self._load())

    def on_change(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def _changed(self) -> None:
        self._compiled = _Compiled(self._load())
        for listener in self._listeners:
            listener()

    def _load(self) -> list[Exclusion]:
        with self._db.lock:
            rows = self._db.conn.execute(
                "SELECT id, value, kind, protocol, agent_id, comment, created_at FROM exclusions ORDER BY created_at").fetchall()
        return [Exclusion(*row) for row in rows]

    def all(self) -> list[Exclusion]:
        return list(self._compiled.entries)

    def add(self, value: str, protocol: str, agent_id: str | None, comment: str,
            confirm_blanket: bool = False) -> Exclusion:
        kind, normalised = classify(value)
        if protocol not in SCOPES:
            raise ValueError(f"protocol must be one of {', '.join(SCOPES)} (got {protocol!r})")
        if is_blanket(kind, normalised, self._suffixes) and not confirm_blanket:
            raise BlanketExclusion(f"{normalised} is a blanket exclusion: it would switch detection off for "
                                   f"{'every address' if normalised in ('0.0.0.0/0', '::/0') else 'a large part of the world'}; "
                                   "send confirm_blanket: true to add it anyway")
        entry = Exclusion(str(uuid.uuid4()), normalised, kind, protocol, agent_id or None, comment, time.time())
        with self._db.lock, self._db.conn:
            self._db.conn.execute("INSERT INTO exclusions VALUES (?, ?, ?, ?, ?, ?, ?)", tuple(asdict(entry).values()))
        self._changed()
        if confirm_blanket and self.is_blanket(entry):
            log.warning("blanket exclusion added value=%s protocol=%s agent=%s: detection is off for what it covers",
                        entry.value, entry.protocol, entry.agent_id)
        return entry

    def delete(self, entry_id: str) -> bool:
        with self._db.lock, self._db.conn:
            deleted = self._db.conn.execute("DELETE FROM exclusions WHERE id = ?", (entry_id,)).rowcount
        self._changed()
        return bool(deleted)

    def replace_all(self, entries: list[Exclusion]) -> None:
        """Hold exactly `entries` (a cluster analyzer taking the manager's exclusions), in one transaction."""
        with self._db.lock, self._db.conn:
            self._db.conn.execute("DELETE FROM exclusions")
            self._db.conn.executemany("INSERT INTO exclusions VALUES (?, ?, ?, ?, ?, ?, ?)",
                                      [tuple(asdict(e).values()) for e in entries])
        self._changed()

    def blanket(self) -> list[Exclusion]:
        """The active blanket entries (confirmed ones, and any stored before confirmation existed)."""
        return [e for e in self._compiled.entries if is_blanket(e.kind, e.value, self._suffixes)]

    def is_blanket(self, entry: Exclusion) -> bool:
        return is_blanket(entry.kind, entry.value, self._suffixes)

    def warnings(self) -> list[str]:
        """One line per active blanket entry, for the status document."""
        return [f"blanket exclusion active: {e.value} (protocol {e.protocol}"
                f"{', agent ' + e.agent_id if e.agent_id else ''}) switches detection off for what it covers"
                for e in self.blanket()]

    def allows(self, detection: Detection) -> bool:
        """The pipeline's detection filter: False drops the detection."""
        return not self._compiled.excluded(detection)

