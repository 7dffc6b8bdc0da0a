"""Shared pieces of the attack tests: a probe that keeps asking /api/status while an attack runs.

The probe is a process of its own, as a monitoring client is: in the test's interpreter its TLS handshakes
would wait for the same lock as the server under attack, and it would time that wait as well as the answer.
"""

from __future__ import annotations

import multiprocessing
import ssl
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.conftest import Rest, RunningAppliance

# The promise every attack test checks: the public status answers within this long throughout.
STATUS_DEADLINE_S = 1.0
_SPAWN = multiprocessing.get_context("spawn")  # the test process already holds gRPC threads: never fork it


def _probe(base: str, ca_file: str | None, interval: float, ready: Any, stop: Any, report: Any) -> None:
    """In the probe process: GET /api/status on a fresh connection every `interval` s until `stop` is set."""
    context = ssl.create_default_context(cafile=ca_file) if ca_file else None
    rest = Rest(base, "", context)
    answers, failures, slowest = 0, [], 0.0
    while True:
        started = time.monotonic()
        try:
            status, body = rest.get("/api/status", token=None)
            if status != 200 or body.get("status") != "Running":
                failures.append(f"status {status}: {body!r}"[:200])
        except OSError as err:
            failures.append(f"{type(err).__name__}: {err}"[:200])
        slowest = max(slowest, time.monotonic() - started)
        answers += 1
        ready.set()
        if stop.wait(interval) and answers >= 3:
            break
    report.put((answers, failures, slowest))


class StatusProbe:
    """Asks GET /api/status every `interval` seconds on a fresh connection from another process; records the
    slowest answer."""

    def __init__(self, appliance: RunningAppliance, interval: float = 0.1) -> None:
        ca_file = str(appliance.app.ca.ca_cert_path) if appliance.rest.context is not None else None
        self._ready, self._stop, self._report = _SPAWN.Event(), _SPAWN.Event(), _SPAWN.Queue()
        self._process = _SPAWN.Process(target=_probe, name="status-probe", daemon=True, args=(
            appliance.rest.base, ca_file, interval, self._ready, self._stop, self._report))
        self.answers = 0
        self.failures: list[str] = []
        self.slowest = 0.0

    def start(self) -> None:
        """Start the probe and return once it has had its first answer, so that the attack runs under it."""
        self._process.start()
        assert self._ready.wait(30), "the status probe never got a first answer"

    def finish(self) -> None:
        """Stop the probe (after at least 3 answers) and collect what it saw."""
        self._stop.set()
        self.answers, self.failures, self.slowest = self._report.get(timeout=30)
        self._process.join(timeout=10)

    def check(self) -> None:
        assert self.answers >= 3, f"the probe got only {self.answers} answers"
        assert not self.failures, self.failures[:5]
        assert self.slowest < STATUS_DEADLINE_S, f"/api/status took {self.slowest:.2f} s"


@contextmanager
def status_probe(appliance: RunningAppliance) -> Iterator[StatusProbe]:
    """Run a StatusProbe for the duration of the block, then check it held."""
    probe = StatusProbe(appliance)
    probe.start()
    try:
        yield probe
    finally:
        probe.finish()
    probe.check()
