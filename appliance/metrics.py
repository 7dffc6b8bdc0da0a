"""Metrics: counters pulled from the components, and a bounded history of snapshots."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

HISTORY_SIZE = 120

log = logging.getLogger(__name__)


class MetricsCollector:
    """Builds a metrics snapshot from the live components (pull, so the hot path only counts)."""

    def __init__(self, sources: dict[str, Callable[[], Any]]) -> None:
        self._sources = sources

    def snapshot(self) -> dict[str, Any]:
        values: dict[str, Any] = {"timestamp": time.time()}
        for name, read in self._sources.items():
            values[name] = read()
        return values


class MetricsHistory:
    """A ring of the last 120 snapshots, one taken every `interval` seconds by a daemon thread."""

    def __init__(self, collector: MetricsCollector, interval: float, size: int = HISTORY_SIZE) -> None:
        self._collector = collector
        self.interval = interval
        self._ring: deque[dict[str, Any]] = deque(maxlen=size)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def take(self) -> None:
        self._ring.append(self._collector.snapshot())

    def entries(self) -> list[dict[str, Any]]:
        return list(self._ring)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.take()
            except Exception:  # a failing source must not end the history for good
                log.exception("metrics snapshot failed")

    def start(self) -> None:
        self.take()
        self._thread = threading.Thread(target=self._run, name="metrics-history", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
