"""Exclusions (the whitelist): values whose detections are dropped before correlation.

An entry has a value (an IPv4/IPv6 address, a CIDR, or a domain), a protocol scope and an optional
agent scope. A domain entry covers the domain and every subdomain (`example.com` covers
`a.b.example.com`, not `badexample.com`). The scope matches a detection's application protocol
(dns, http, tls, icmp) or its transport (tcp, udp, icmp); `any` matches all. So a dns-scoped
`example.com` drops DNS detections about example.com but not TLS detections toward it, and a
tcp-scoped address covers TLS and HTTP detections to it. Changes apply to the next detection.
"""

from __future__ import annotations

import ipaddress
import re
import time
import uuid
from dataclasses import asdict, dataclass

from appliance.detection.database import DetectionDatabase
from appliance.model import Detection

SCOPES = ("dns", "http", "tls", "icmp", "tcp", "udp", "any")
_DOMAIN = re.compile(r"^(?=.{1,253}$)([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\.)*[a-z0-9_]([a-z0-9-]{0,61}[a-z0-9])?$")


@dataclass(frozen=True, slots=True)
class Exclusion:
    id: str
    value: str
    kind: str  # ip | cidr | domain
    protocol: str
    agent_id: str | None
    comment: str
    created_at: float


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
        with db.lock, db.conn:
            db.conn.execute("CREATE TABLE IF NOT EXISTS exclusions (id TEXT PRIMARY KEY, value TEXT NOT NULL, "
                            "kind TEXT NOT NULL, protocol TEXT NOT NULL, agent_id TEXT, comment TEXT NOT NULL, "
                            "created_at REAL NOT NULL)")
        self._compiled = _Compiled(self._load())

    def _load(self) -> list[Exclusion]:
        with self._db.lock:
            rows = self._db.conn.execute(
                "SELECT id, value, kind, protocol, agent_id, comment, created_at FROM exclusions ORDER BY created_at").fetchall()
        return [Exclusion(*row) for row in rows]

    def all(self) -> list[Exclusion]:
        return list(self._compiled.entries)

    def add(self, value: str, protocol: str, agent_id: str | None, comment: str) -> Exclusion:
        kind, normalised = classify(value)
        if protocol not in SCOPES:
            raise ValueError(f"protocol must be one of {', '.join(SCOPES)} (got {protocol!r})")
        entry = Exclusion(str(uuid.uuid4()), normalised, kind, protocol, agent_id or None, comment, time.time())
        with self._db.lock, self._db.conn:
            self._db.conn.execute("INSERT INTO exclusions VALUES (?, ?, ?, ?, ?, ?, ?)", tuple(asdict(entry).values()))
        self._compiled = _Compiled(self._load())
        return entry

    def delete(self, entry_id: str) -> bool:
        with self._db.lock, self._db.conn:
            deleted = self._db.conn.execute("DELETE FROM exclusions WHERE id = ?", (entry_id,)).rowcount
        self._compiled = _Compiled(self._load())
        return bool(deleted)

    def allows(self, detection: Detection) -> bool:
        """The pipeline's detection filter: False drops the detection."""
        return not self._compiled.excluded(detection)

