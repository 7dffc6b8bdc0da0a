"""Polling for the suite: wait until a condition holds, without fixed sleeps."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(check: Callable[[], T], timeout: float = 15.0, interval: float = 0.05) -> T:
    """Call `check` until it returns something truthy or `timeout` passes; return its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)
