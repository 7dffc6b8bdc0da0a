"""Numbered schema migrations for the appliance's SQLite databases (the concierge's model, in SQLite's own
version slot).

Each database has a folder here (`detection/`, `enrollment/`, `console/`) of `NNNN_name.sql` files. A
database's `PRAGMA user_version` is the number of the last one applied; opening it applies the newer ones
in order, each with its version bump in one transaction, so a crash leaves it at a whole version. The
first migration of each folder uses `IF NOT EXISTS`: it adopts a database that the appliance created before
migrations existed (version 0, same tables). A database newer than this code is refused, never touched.
"""

from __future__ import annotations

import logging
import re
import sqlite3
from pathlib import Path

from appliance.errors import ApplianceError

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


class MigrationError(ApplianceError):
    """A schema this code cannot bring up to date."""


def migrations(folder: Path) -> list[tuple[int, Path]]:
    """The folder's migrations in order; numbers start at 1 and have no gaps."""
    found = sorted((int(m.group(1)), p) for p in folder.iterdir() if (m := _NAME.match(p.name)))
    numbers = [n for n, _ in found]
    if numbers != list(range(1, len(found) + 1)):
        raise MigrationError(f"{folder}: migrations must be numbered 0001, 0002, ... without gaps (found {numbers})")
    return found


def migrate(conn: sqlite3.Connection, database: str, folder: Path | None = None) -> list[int]:
    """Bring `conn` up to date with the migrations of `database`; returns the numbers applied."""
    steps = migrations(folder or HERE / database)
    current = int(conn.execute("PRAGMA user_version").fetchone()[0])
    latest = steps[-1][0] if steps else 0
    if current > latest:
        raise MigrationError(f"the {database} database is at schema version {current}, newer than this appliance "
                             f"knows ({latest}): it was written by a newer release; upgrade instead of downgrading")
    applied = []
    for number, path in steps[current:]:
        script = path.read_text(encoding="utf-8")
        try:
            # executescript commits whatever is pending first; the migration and its version are one transaction.
            conn.executescript(f"BEGIN IMMEDIATE;\n{script}\nPRAGMA user_version = {number};\nCOMMIT;")
        except sqlite3.Error as err:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise MigrationError(f"{database} migration {path.name} failed: {err}") from err
        log.info("%s database: applied migration %s", database, path.name)
        applied.append(number)
    return applied
