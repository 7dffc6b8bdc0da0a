"""The detection state database: one SQLite file in WAL mode under the state directory.

Alerts with their triage, exclusions and the analysis config live here; flows do not. WAL with
`synchronous=NORMAL` keeps every committed transaction across a process crash (kill -9); only a
power loss may cost the last ones. One connection, serialised by one lock: statements are short.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

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
        self.lock = threading.Lock()

    def close(self) -> None:
        with self.lock:
            self.conn.close()
