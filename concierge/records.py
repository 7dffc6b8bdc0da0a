"""Organization-scoped table access shared by the simple resource stores (rooms, menu, bookings, tickets...)."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any, Sequence

from concierge.clock import Clock, new_id
from concierge.database import Database, Row, Tx
from concierge.errors import NotFound


def _value(value: Any) -> Any:
    if isinstance(value, bool):
        return 1 if value else 0
    if isinstance(value, (date, datetime)):
        return value.isoformat()
    return value


class RecordStore:
    """CRUD on one table whose rows carry organization_id, created_at and updated_at."""

    def __init__(self, db: Database, clock: Clock, table: str, prefix: str, noun: str, booleans: Sequence[str] = ()) -> None:
        self.db = db
        self.clock = clock
        self.table = table
        self.prefix = prefix
        self.noun = noun
        self.booleans = tuple(booleans)

    def _out(self, row: Row) -> Row:
        for key in self.booleans:
            row[key] = bool(row[key])
        return row

    def get_in(self, tx: Tx, org_id: str, record_id: str) -> Row:
        row = tx.one(f"SELECT * FROM {self.table} WHERE id = ? AND organization_id = ?", (record_id, org_id))
        if row is None:
            raise NotFound(f"{self.noun} not found")
        return self._out(row)

    def get(self, org_id: str, record_id: str) -> Row:
        with self.db.transaction(write=False) as tx:
            return self.get_in(tx, org_id, record_id)

    def list(self, org_id: str, filters: dict[str, Any] | None = None, order: str = "created_at DESC, id", extra: str = "", args: Sequence[Any] = ()) -> list[Row]:
        where = ["organization_id = ?"]
        params: list[Any] = [org_id]
        for key, value in (filters or {}).items():
            if value is not None:
                where.append(f"{key} = ?")
                params.append(_value(value))
        if extra:
            where.append(extra)
            params += list(args)
        with self.db.transaction(write=False) as tx:
            return [self._out(r) for r in tx.all(f"SELECT * FROM {self.table} WHERE {' AND '.join(where)} ORDER BY {order} LIMIT 1000", params)]

    def insert_in(self, tx: Tx, org_id: str, values: dict[str, Any]) -> str:
        rid = new_id(self.prefix)
        now = self.clock.iso()
        cols = ["id", "organization_id", "created_at", "updated_at", *values]
        tx.execute(f"INSERT INTO {self.table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", [rid, org_id, now, now, *map(_value, values.values())])
        return rid

    def insert(self, org_id: str, values: dict[str, Any]) -> Row:
        with self.db.transaction() as tx:
            rid = self.insert_in(tx, org_id, values)
            return self.get_in(tx, org_id, rid)

    def update_in(self, tx: Tx, org_id: str, record_id: str, values: dict[str, Any]) -> None:
        self.get_in(tx, org_id, record_id)
        if values:
            sets = ", ".join(f"{k} = ?" for k in values)
            tx.execute(f"UPDATE {self.table} SET {sets}, updated_at = ? WHERE id = ? AND organization_id = ?", [*map(_value, values.values()), self.clock.iso(), record_id, org_id])

    def update(self, org_id: str, record_id: str, values: dict[str, Any]) -> Row:
        with self.db.transaction() as tx:
            self.update_in(tx, org_id, record_id, values)
            return self.get_in(tx, org_id, record_id)

    def delete(self, org_id: str, record_id: str) -> None:
        with self.db.transaction() as tx:
            self.get_in(tx, org_id, record_id)
            tx.execute(f"DELETE FROM {self.table} WHERE id = ? AND organization_id = ?", (record_id, org_id))
