"""Alert queries: the filter, sort and cursor the console's inbox sends, parsed once into SQL.

Every value is validated here (unknown status, severity or category, bad time, forged cursor all
raise `QueryError` naming the parameter) and reaches SQLite only as a bound parameter.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from appliance.errors import ApplianceError
from appliance.model import Category, Severity

STATUSES = ("New", "Acknowledged", "Investigating", "Resolved", "FalsePositive")
# Query name -> column. Each takes comma-separated values (OR); `not_<name>` excludes them.
FILTER_COLUMNS = {"status": "status", "severity": "severity", "category": "category", "agent_id": "agent_id",
                  "indicator": "indicator"}
FILTER_NAMES = (*FILTER_COLUMNS, *(f"not_{n}" for n in FILTER_COLUMNS), "since", "until")
SORTS = {"last_seen": "last_ns", "first_seen": "first_ns", "severity": "severity"}
MAX_VALUES = 50
_RELATIVE = re.compile(r"^-(\d{1,6})([smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class QueryError(ApplianceError):
    """A filter, sort or cursor parameter holds a bad value; `field` names it."""

    def __init__(self, field_name: str, reason: str) -> None:
        super().__init__(f"{field_name}: {reason}")
        self.field = field_name
        self.reason = reason


def _values(name: str, raw: str) -> tuple[Any, ...]:
    items = [v.strip() for v in raw.split(",") if v.strip()]
    if not items:
        raise QueryError(name, "is empty")
    if len(items) > MAX_VALUES:
        raise QueryError(name, f"more than {MAX_VALUES} values")
    base = name.removeprefix("not_")
    out: list[Any] = []
    for item in items:
        if len(item) > 256:
            raise QueryError(name, "a value is longer than 256 characters")
        if base == "status" and item not in STATUSES:
            raise QueryError(name, f"must be one of {', '.join(STATUSES)} (got {item[:40]!r})")
        if base == "category" and item not in {c.value for c in Category}:
            raise QueryError(name, f"unknown category {item[:40]!r}")
        if base == "severity":
            try:
                out.append(int(Severity.parse(item)))
            except (ValueError, KeyError):
                raise QueryError(name, f"must be Low, Medium, High or Critical (got {item[:40]!r})") from None
            continue
        out.append(item)
    return tuple(dict.fromkeys(out))


def parse_time(name: str, raw: str, now: float) -> int:
    """Nanoseconds since the epoch from ISO 8601 or a relative `-24h` (s, m, h, d, w)."""
    match = _RELATIVE.match(raw)
    if match:
        return int((now - int(match.group(1)) * _UNIT_S[match.group(2)]) * 1e9)
    if raw == "now":
        return int(now * 1e9)
    try:
        when = dt.datetime.fromisoformat(raw)
    except ValueError:
        raise QueryError(name, f"must be ISO 8601 or relative like -24h (got {raw[:40]!r})") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return int(when.timestamp() * 1e9)


@dataclass(frozen=True)
class AlertFilter:
    """Which alerts a query, export or bulk action addresses."""

    include: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    exclude: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    since_ns: int | None = None
    until_ns: int | None = None

    @property
    def empty(self) -> bool:
        return not (self.include or self.exclude or self.since_ns is not None or self.until_ns is not None)

    def where(self) -> tuple[list[str], list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        for column, values in self.include.items():
            clauses.append(f"{column} IN ({', '.join('?' * len(values))})")
            params.extend(values)
        for column, values in self.exclude.items():
            clauses.append(f"{column} NOT IN ({', '.join('?' * len(values))})")
            params.extend(values)
        if self.since_ns is not None:
            clauses.append("last_ns >= ?")
            params.append(self.since_ns)
        if self.until_ns is not None:
            clauses.append("last_ns <= ?")
            params.append(self.until_ns)
        return clauses, params


def parse_filter(get: Callable[[str], str | None], now: float | None = None) -> AlertFilter:
    """An AlertFilter from named parameters (query string or a bulk body); QueryError on a bad one."""
    now = time.time() if now is None else now
    include: dict[str, tuple[Any, ...]] = {}
    exclude: dict[str, tuple[Any, ...]] = {}
    for name, column in FILTER_COLUMNS.items():
        raw = get(name)
        if raw:
            include[column] = _values(name, raw)
        raw = get(f"not_{name}")
        if raw:
            exclude[column] = _values(f"not_{name}", raw)
    since = get("since")
    until = get("until")
    since_ns = parse_time("since", since, now) if since else None
    until_ns = parse_time("until", until, now) if until else None
    if since_ns is not None and until_ns is not None and since_ns > until_ns:
        raise QueryError("since", "is after until")
    return AlertFilter(include, exclude, since_ns, until_ns)


@dataclass(frozen=True)
class AlertOrder:
    """Sort column, direction, and the keyset position to continue after (cursor)."""

    column: str = "last_ns"
    descending: bool = True
    after: tuple[int, str] | None = None

    def sql(self) -> tuple[str, str, list[Any]]:
        """(extra WHERE clause or "", ORDER BY, params)."""
        direction = "DESC" if self.descending else "ASC"
        order = f"ORDER BY {self.column} {direction}, id {direction}"
        if self.after is None:
            return "", order, []
        op = "<" if self.descending else ">"
        value, last_id = self.after
        return f"({self.column} {op} ? OR ({self.column} = ? AND id {op} ?))", order, [value, value, last_id]

    def cursor_for(self, row_value: int, row_id: str) -> str:
        raw = json.dumps([self.column, self.descending, row_value, row_id], separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def parse_order(sort: str | None, cursor: str | None) -> AlertOrder:
    sort = sort or "-last_seen"
    descending = sort.startswith("-")
    name = sort.removeprefix("-")
    if name not in SORTS:
        choices = ", ".join(f"{s}, -{s}" for s in SORTS)
        raise QueryError("sort", f"must be one of {choices} (got {sort[:40]!r})")
    column = SORTS[name]
    if not cursor:
        return AlertOrder(column, descending)
    if len(cursor) > 512:
        raise QueryError("cursor", "is not a cursor this API issued")
    try:
        decoded = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        c_column, c_desc, value, last_id = decoded
        valid = (c_column == column and c_desc is descending and isinstance(value, int)
                 and not isinstance(value, bool) and isinstance(last_id, str) and len(last_id) <= 64)
    except (ValueError, TypeError, UnicodeDecodeError, RecursionError):
        valid = False
    if not valid:
        raise QueryError("cursor", "is not a cursor this API issued for this sort")
    return AlertOrder(column, descending, (value, last_id))
