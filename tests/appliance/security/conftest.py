"""Shared pieces of the attack tests: a probe that keeps asking /api/status while an attack runs.

The probe is a process of its own, as a monitoring client is: in the test's interpreter its TLS handshakes
would wait for the same lock as the server under attack, and it would time that wait as well as the answer.
"""

from __future__ import annotations

import multiprocessing
import queue
import ssl
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
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
        except Exception as err:  # noqa: BLE001 -- every failure is the probe's finding, reported, never its end
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
        try:
            self.answers, self.failures, self.slowest = self._report.get(timeout=30)
        except queue.Empty:
            self.failures = [f"the status probe ended without a report (exit code {self._process.exitcode})"]
        self._process.join(timeout=10)

    def check(self) -> None:
        assert self.answers >= 3, f"the probe got only {self.answers} answers"
        assert not self.failures, self.failures[:5]
        assert self.slowest < STATUS_DEADLINE_S, f"/api/status took {self.slowest:.2f} s"


def in_attacker_process(fn: Callable[..., Any], *args: Any, timeout: float = 90) -> Any:
    """Run fn(*args) in a process of its own, as a real attacker is (spawned: this one already holds gRPC threads),
    and return its result. `fn` and its arguments must pickle."""
    with ProcessPoolExecutor(1, mp_context=_SPAWN) as attacker:
        return attacker.submit(fn, *args).result(timeout=timeout)


def _stream_batches(target: str, creds: tuple[bytes, bytes, bytes] | None, batches: list[bytes],
                    metadata: list[tuple[str, str]], timeout: float) -> tuple[int, int]:
    """In the attacker process: one StreamPacketBatches call with these serialized batches."""
    import grpc

    from appliance.generated import sensor_pb2, sensor_pb2_grpc

    if creds is None:
        channel = grpc.insecure_channel(target)
    else:
        ca_pem, key_pem, cert_pem = creds
        channel = grpc.secure_channel(target, grpc.ssl_channel_credentials(ca_pem, key_pem, cert_pem),
                                      options=[("grpc.ssl_target_name_override", "localhost")])
    with channel:
        stub = sensor_pb2_grpc.SensorServiceStub(channel)
        reply = stub.StreamPacketBatches((sensor_pb2.PacketBatch.FromString(b) for b in batches), metadata=metadata,
                                         timeout=timeout)
    return reply.packets_received, reply.packets_rejected


def stream_from_attacker_process(appliance: RunningAppliance, batches: list[Any], metadata: list[tuple[str, str]],
                                 timeout: float = 120) -> tuple[int, int]:
    """Stream `batches` (PacketBatch messages) to the appliance from a process of its own, as an agent does, with a
    fresh agent certificate; returns the reply's (packets_received, packets_rejected). In the test's interpreter the
    client's serialization would share the server's lock, and the probe would time the attacker's work too."""
    app = appliance.app
    creds = None
    if app.settings.grpc.tls:
        issued = app.ca.issue_agent("sensor-agent-test00")
        creds = (app.ca.ca_pem, issued.key_pem, issued.cert_pem)
    wire_batches = [b.SerializeToString() for b in batches]
    return in_attacker_process(_stream_batches, f"127.0.0.1:{app.grpc_port}", creds, wire_batches, metadata, timeout,
                               timeout=timeout + 30)


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
