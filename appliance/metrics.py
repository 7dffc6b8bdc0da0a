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

    def __init__(self, sources: dict[str, Callable[[], Any]],
                 derived: list[Callable[[], dict[str, Any]]] | None = None) -> None:
        self._sources = sources
        self._derived = derived or []  # each returns several fields at once (rates, the console's names)

    def snapshot(self) -> dict[str, Any]:
        values: dict[str, Any] = {"timestamp": time.time()}
        for name, read in self._sources.items():
            values[name] = read()
        for fields in self._derived:
            values.update(fields())
        return values


class ThroughputMeter:
    """The console's MetricsSnapshot fields: totals, per-second rates over the last `window` seconds,
    active threats and how long ingestion has run. Every call samples the counters; the history
    thread calls it on its period, so a rate never spans more than window + period."""

    def __init__(self, packets: Callable[[], int], byte_count: Callable[[], int], threats: Callable[[], int],
                 window: float = 5.0) -> None:
        self._packets = packets
        self._bytes = byte_count
        self._threats = threats
        self._window = window
        self._started = time.monotonic()
        self._samples: deque[tuple[float, int, int]] = deque()
        self._lock = threading.Lock()

    def fields(self) -> dict[str, Any]:
        now = time.monotonic()
        packets, nbytes = self._packets(), self._bytes()
        with self._lock:
            self._samples.append((now, packets, nbytes))
            # keep the newest sample at or before the window's start as the base of the rate
            while len(self._samples) > 2 and self._samples[1][0] <= now - self._window:
                self._samples.popleft()
            base_t, base_p, base_b = self._samples[0]
        span = now - base_t
        pps = (packets - base_p) / span if span > 0 else 0.0
        bps = (nbytes - base_b) / span if span > 0 else 0.0
        return {"totalPackets": packets, "totalBytes": nbytes, "packetsPerSecond": round(pps, 2),
                "bytesPerSecond": round(bps, 2), "activeThreats": self._threats(),
                "captureUptime": round(now - self._started, 1)}


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
