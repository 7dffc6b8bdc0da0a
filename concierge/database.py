"""SQL access for SQLite (default, WAL) and PostgreSQL (DATABASE_URL), with numbered migrations applied at start.

Stores write portable SQL with `?` placeholders; the PostgreSQL back end rewrites them to `%s`.
"""

from __future__ import annotations

import logging
import queue
import re
import sqlite3
import threading
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any, Iterator, Protocol, Sequence

log = logging.getLogger(__name__)

Row = dict[str, Any]


class IntegrityError(Exception):
    """A uniqueness or foreign-key constraint refused the write (either back end)."""


class Tx(Protocol):
    kind: str  # the back end ("sqlite" or "postgresql"), for the rare statement that differs

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int: ...
    def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None: ...
    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]: ...
    def tuples(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...


def migrations() -> list[tuple[int, str, str]]:
    """Numbered migration files shipped in concierge/migrations, in order."""
    out = []
    for entry in resources.files("concierge.migrations").iterdir():
        match = re.match(r"^(\d{4})_(\w+)\.sql$", entry.name)
        if match:
            out.append((int(match.group(1)), entry.name, entry.read_text()))
    return sorted(out)



class _SqliteTx:
    kind = "sqlite"

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        try:
            return self.conn.execute(sql, tuple(params)).rowcount
        except sqlite3.IntegrityError as err:
            raise IntegrityError(str(err)) from err

    def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        cur = self.conn.execute(sql, tuple(params))
        row = cur.fetchone()
        return dict(row) if row is not None else None

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return [dict(r) for r in self.conn.execute(sql, tuple(params)).fetchall()]

    def tuples(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows as plain tuples in SELECT order (hot paths: no per-row mapping objects)."""
        cur = self.conn.cursor()
        cur.row_factory = None
        return cur.execute(sql, tuple(params)).fetchall()


class SqliteDatabase:
    """One SQLite file in WAL mode; a connection per thread, writes serialised by BEGIN IMMEDIATE."""

    kind = "sqlite"

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute("PRAGMA busy_timeout=30000")
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    @contextmanager
    def transaction(self, write: bool = True) -> Iterator[Tx]:
        """A transaction; nested calls on the same thread join the outer one."""
        conn = self._conn()
        if conn.in_transaction:
            yield _SqliteTx(conn)
            return
        conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        try:
            yield _SqliteTx(conn)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    @contextmanager
    def statements(self) -> Iterator[Tx]:
        """Reads without an explicit transaction: each statement is its own snapshot (no BEGIN/COMMIT round).

        For hot read paths whose statements need no common snapshot; inside a transaction it joins it.
        """
        yield _SqliteTx(self._conn())

    def executescript(self, script: str) -> None:
        self._conn().executescript(script)

    def close(self) -> None:
        with self._lock:
            for conn in self._all:
                try:
                    conn.close()
                except sqlite3.ProgrammingError:
                    pass  # created in another thread that is gone; closing is best effort
            self._all.clear()


class _PgTx:
    kind = "postgresql"

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    @staticmethod
    def _sql(sql: str) -> str:
        return sql.replace("%", "%%").replace("?", "%s")

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        import psycopg

        try:
            if sql.lstrip()[:6].upper() == "INSERT":
                # a savepoint, so a caught constraint violation leaves the transaction usable (as in SQLite)
                with self.conn.transaction():
                    return self.conn.execute(self._sql(sql), tuple(params)).rowcount
            return self.conn.execute(self._sql(sql), tuple(params)).rowcount
        except psycopg.errors.IntegrityError as err:
            raise IntegrityError(str(err)) from err

    def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        row = self.conn.execute(self._sql(sql), tuple(params)).fetchone()
        return dict(row) if row is not None else None

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return [dict(r) for r in self.conn.execute(self._sql(sql), tuple(params)).fetchall()]

    def tuples(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        from psycopg.rows import tuple_row

        return self.conn.cursor(row_factory=tuple_row).execute(self._sql(sql), tuple(params)).fetchall()


class PostgresDatabase:
    """PostgreSQL through psycopg 3 with a small fixed pool; same SQL and migrations as SQLite."""

    kind = "postgresql"

    def __init__(self, url: str, size: int = 8) -> None:
        import psycopg
        from psycopg.rows import dict_row

        self.url = url
        self._local = threading.local()
        self._pool: queue.LifoQueue[Any] = queue.LifoQueue()
        self._conns = [psycopg.connect(url, row_factory=dict_row, autocommit=False) for _ in range(size)]
        for conn in self._conns:
            self._pool.put(conn)

    @contextmanager
    def transaction(self, write: bool = True) -> Iterator[Tx]:
        """A transaction; nested calls on the same thread join the outer one."""
        current = getattr(self._local, "conn", None)
        if current is not None:
            yield _PgTx(current)
            return
        conn = self._pool.get()
        self._local.conn = conn
        try:
            with conn.transaction():
                yield _PgTx(conn)
        finally:
            self._local.conn = None
            if conn.closed:
                import psycopg
                from psycopg.rows import dict_row

                conn = psycopg.connect(self.url, row_factory=dict_row, autocommit=False)
            self._pool.put(conn)

    @contextmanager
    def statements(self) -> Iterator[Tx]:
        """Reads that need no common snapshot (a pooled connection in a read transaction here)."""
        with self.transaction(write=False) as tx:
            yield tx

    def executescript(self, script: str) -> None:
        with self.transaction() as tx:
            assert isinstance(tx, _PgTx)
            tx.conn.execute(script)

    def close(self) -> None:
        for conn in self._conns:
            conn.close()


Database = SqliteDatabase | PostgresDatabase


def open_database(sqlite_path: Path, database_url: str = "") -> Database:
    """Open the configured database and apply pending migrations (numbered, each once)."""
    db: Database = PostgresDatabase(database_url) if database_url else SqliteDatabase(sqlite_path)
    migrate(db)
    return db


def migrate(db: Database) -> list[int]:
    """Apply every migration newer than the recorded version; returns the numbers applied."""
    db.executescript("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL)")
    if db.kind == "postgresql":
        with db.transaction() as tx:  # one migrator at a time across instances
            tx.execute("SELECT pg_advisory_xact_lock(4242)")
            return _apply(db, tx)
    with db.transaction() as tx:
        return _apply(db, tx)


def _apply(db: Database, tx: Tx) -> list[int]:
    done = {r["version"] for r in tx.all("SELECT version FROM schema_migrations")}
    applied = []
    for number, name, script in migrations():
        if number in done:
            continue
        code = "\n".join(line for line in script.splitlines() if not line.strip().startswith("--"))
        for statement in (s.strip() for s in code.split(";")):
            if statement:
                tx.execute(statement)
        tx.execute("INSERT INTO schema_migrations (version, name) VALUES (?, ?)", (number, name))
        log.info("migration applied version=%d name=%s backend=%s", number, name, db.kind)
        applied.append(number)
    return applied
