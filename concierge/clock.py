"""Time and identifiers, injectable so tests can move the clock."""

from __future__ import annotations

import secrets
import time
from datetime import datetime, timezone


class Clock:
    """Wall clock; tests substitute a subclass with a settable `offset`."""

    def __init__(self) -> None:
        self.offset = 0.0

    def now(self) -> float:
        return time.time() + self.offset

    def iso(self) -> str:
        return datetime.fromtimestamp(self.now(), timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")

    def today(self) -> str:
        return datetime.fromtimestamp(self.now(), timezone.utc).date().isoformat()


def new_id(prefix: str) -> str:
    """A random, URL-safe id with a type prefix (gst_..., pi_...)."""
    return f"{prefix}_{secrets.token_hex(10)}"
