"""Shared pieces of the attack tests: a probe that keeps asking /api/status while an attack runs."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from tests.conftest import RunningAppliance

# The promise every attack test checks: the public status answers within this long throughout.
STATUS_DEADLINE_S = 1.0


class StatusProbe:
    """Asks GET /api/status every `interval` seconds on a fresh connection; records the slowest answer."""

    def __init__(self, appliance: RunningAppliance, interval: float = 0.1) -> None:
        self._appliance = appliance
        self._interval = interval
        self._stop = threading.Event()
        self.answers = 0
        self.failures: list[str] = []
        self.slowest = 0.0
        self._thread = threading.Thread(target=self._run, name="status-probe", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                status, body = self._appliance.rest.get("/api/status", token=None)
                if status != 200 or body.get("status") != "Running":
                    self.failures.append(f"status {status}: {body!r}"[:200])
            except OSError as err:
                self.failures.append(f"{type(err).__name__}: {err}"[:200])
            took = time.monotonic() - started
            self.slowest = max(self.slowest, took)
            self.answers += 1
            self._stop.wait(self._interval)

    def check(self) -> None:
        assert self.answers >= 3, f"the probe got only {self.answers} answers"
        assert not self.failures, self.failures[:5]
        assert self.slowest < STATUS_DEADLINE_S, f"/api/status took {self.slowest:.2f} s"


@contextmanager
def status_probe(appliance: RunningAppliance) -> Iterator[StatusProbe]:
    """Run a StatusProbe for the duration of the block, then check it held."""
    probe = StatusProbe(appliance)
    probe._thread.start()
    try:
        yield probe
    finally:
        deadline = time.monotonic() + 5  # a quick attack still gets a few answers, the last ones after it
        while probe.answers < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        probe._stop.set()
        probe._thread.join(timeout=10)
    probe.check()
