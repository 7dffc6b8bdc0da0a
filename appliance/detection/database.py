"""The detection state database: one SQLite file in WAL mode under the state directory.

Alerts with their triage, exclusions, the analysis config and the console's settings live here; flows do
not. The tables are the migrations' (appliance/migrations/detection/). WAL with
`synchronous=NORMAL` keeps every committed transaction across a process crash (kill -9); only a
power loss may cost the last ones. One connection, serialised by one lock: statements are short.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from appliance.migrations import migrate

DB_FILE = "detection.db"


class DetectionDatabase:
    """Owns the connection and the lock the stores share."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level="DEFERRED")
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.execute("PRAGMA busy_timeout=5000")
        migrate(self.conn, "detection")  # every table of the stores below, created or brought up to date
        self.lock = threading.Lock()

    def close(self) -> None:
        with self.lock:
            self.conn.close()
