"""CaptureSupervisor: starts, watches, restarts and stops the capture process; owns the capture's state.

Errors are states, not crashes: an interface that goes down or vanishes (netlink) turns the status
into `error` and stops the capture; a capture process that dies is restarted with exponential
backoff and the error is recorded (`lastError`, `restarts`). Counters of the processes of one
start add up across restarts.

Runners: `child` (default) spawns `python -m appliance.capture` itself, which needs CAP_NET_RAW in
the appliance's process; `service` leaves the process to `sensor-capture.service` (systemd restarts
it) and only writes the spec and reads the status, which must be fresh (a heartbeat).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from appliance.capture import AlreadyRunning, UnknownInterface
from appliance.capture.interfaces import InterfaceCatalog
from appliance.capture.linkwatch import LinkWatcher
from appliance.capture.model import PROTOCOLS, CaptureStatus, StartRequest
from appliance.capture.runner import EXIT_NOT_PERMITTED, identity_of
from appliance.capture.spec import CA_FILE, CERT_FILE, KEY_FILE, SPEC_FILE, STATUS_FILE, RunnerSpec, RunnerStatus, write_json
from appliance.capture.state import CaptureStateStore, PersistedCapture
from appliance.console_settings import CaptureSettings
from appliance.ingest.identity import agent_id_for

log = logging.getLogger(__name__)

INSTALL_ROOT = Path(__file__).resolve().parents[2]
_CHILD_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "SENSOR_LOG_LEVEL", "PYTHONUNBUFFERED")


@dataclass
class Counters:
    """Counters of one start, summed over the capture processes it took."""

    packetCount: int = 0
    byteCount: int = 0
    droppedCount: int = 0
    protocolStats: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PROTOCOLS, 0))
    skipped: dict[str, int] = field(default_factory=dict)

    def plus(self, status: RunnerStatus | None) -> Counters:
        if status is None:
            return Counters(self.packetCount, self.byteCount, self.droppedCount, dict(self.protocolStats),
                            dict(self.skipped))
        protocols = {p: self.protocolStats.get(p, 0) + status.protocolStats.get(p, 0) for p in PROTOCOLS}
        skipped = dict(self.skipped)
        for reason, count in status.skipped.items():
            skipped[reason] = skipped.get(reason, 0) + count
        return Counters(self.packetCount + status.packetCount, self.byteCount + status.byteCount,
                        self.droppedCount + status.droppedCount, protocols, skipped)


@dataclass(frozen=True)
class CaptureOptions:
    """The `capture.*` settings the supervisor needs."""

    internal_networks: tuple[str, ...]
    runner: Literal["child", "service"] = "child"
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    heartbeat_timeout: float = 5.0
    tick: float = 0.2


@dataclass(frozen=True)
class StreamTarget:
    """Where the capture process streams: this appliance's gRPC port."""

    address: str
    server_name: str
    insecure: bool


class CaptureSupervisor:
    """The one owner of the capture process and its state (thread-safe)."""

    def __init__(self, control_dir: Path, catalog: InterfaceCatalog, options: CaptureOptions, *,
                 defaults: Callable[[], CaptureSettings], issue_certificate: Callable[[str], tuple[bytes, bytes]],
                 ca_pem: bytes, target: Callable[[], StreamTarget], version: str,
                 resume_allowed: Callable[[], bool] = lambda: True, python: str = sys.executable) -> None:
        """`resume_allowed`: whether a capture running at the last stop starts again now (the console's
        general.autoStart)."""
        self._dir = control_dir
        self._catalog = catalog
        self._options = options
        self._defaults = defaults
        self._issue = issue_certificate
        self._ca_pem = ca_pem
        self._target = target
        self._version = version
        self._python = python
        self._resume_allowed = resume_allowed
        self._store = CaptureStateStore(control_dir)
        self._lock = threading.RLock()
        self._state: Literal["idle", "running", "error"] = "idle"
        self._config = self._store.load()
        self._active = False          # a capture is wanted (running, or restarting after a crash)
        self._generation = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._proc_started = 0.0
        self._started_at: float | None = None
        self._restarts = 0
        self._backoff = options.backoff_initial
        self._restart_at: float | None = None
        self._last_error: str | None = None
        self._last_error_at: float | None = None
        self._latest: RunnerStatus | None = None  # the current process's last status
        self._base = Counters()                   # counters of the processes before it (same start)
        self._stop = threading.Event()
        self._monitor: threading.Thread | None = None
        self._links = LinkWatcher(self._on_link_problem)
        self.events: dict[str, int] = {"process_exits": 0, "link_errors": 0}

    # -- lifecycle (the appliance's start and stop) ---------------------------------------------
    def start(self) -> None:
        """Begin watching; resume the persisted capture when autoStart says so."""
        self._dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self._dir, 0o700)
        self._links.start()
        self._monitor = threading.Thread(target=self._watch, name="capture-supervisor", daemon=True)
        self._monitor.start()
        config = self._config
        if config.autoStart and config.interface and not self._resume_allowed():
            log.info("capture on %s not resumed: the console settings' general.autoStart is off", config.interface)
        elif config.autoStart and config.interface:
            request = StartRequest(interface=config.interface, promiscuous=config.promiscuous,
                                   snaplen=config.snaplen, bufferSize=config.bufferSize)
            try:
                self.begin(request)
            except (UnknownInterface, AlreadyRunning) as err:
                with self._lock:  # the interface is gone or down: an error to show, autoStart kept for next time
                    self._record_error(f"autoStart: {err}")
                    self._state = "error"

    def close(self) -> None:
        """The appliance stops: end the child process but keep autoStart as it is."""
        self._stop.set()
        if self._monitor is not None:
            self._monitor.join(timeout=5.0)
        self._links.stop()
        with self._lock:
            if self._options.runner == "child":
                self._write_spec(False)
                self._end_process()

    # -- operations (REST) ---------------------------------------------------------------------
    def begin(self, request: StartRequest) -> CaptureStatus:
        """Start capturing on `request.interface`; UnknownInterface (422), AlreadyRunning (409)."""
        with self._lock:
            if self._active and self._state == "running":
                raise AlreadyRunning(f"a capture is already running on {self._config.interface}; stop it first")
            link = self._catalog.find(request.interface)
            if link is None:
                names = ", ".join(i.name for i in self._catalog.list())
                raise UnknownInterface(f"interface: no such interface {request.interface!r} (have {names})")
            if not link.up:
                raise UnknownInterface(f"interface: {request.interface} is down (bring it up first)")
            defaults = self._defaults()
            self._config = PersistedCapture(
                autoStart=True, interface=request.interface,
                promiscuous=defaults.promiscuousMode if request.promiscuous is None else request.promiscuous,
                snaplen=defaults.maxPacketSize if request.snaplen is None else request.snaplen,
                bufferSize=defaults.bufferSize if request.bufferSize is None else request.bufferSize,
            )
            self._store.save(self._config)
            self._end_process()
            self._write_identity(request.interface)
            self._active = True
            self._state = "running"
            self._last_error = self._last_error_at = None
            self._restarts = 0
            self._backoff = self._options.backoff_initial
            self._restart_at = None
            self._base, self._latest = Counters(), None
            self._started_at = time.time()
            self._write_spec(True)
            if self._options.runner == "child":
                self._spawn()
            log.info("capture started interface=%s promiscuous=%s snaplen=%d buffer_mib=%d", self._config.interface,
                     self._config.promiscuous, self._config.snaplen, self._config.bufferSize)
            return self.status()

    def end(self) -> CaptureStatus:
        """Stop capturing (idempotent); autoStart becomes false."""
        with self._lock:
            was_active = self._active
            self._active = False
            self._state = "idle"
            self._write_spec(False)
            self._end_process()
            self._fold_counters()
            self._config = self._config.model_copy(update={"autoStart": False})
            self._store.save(self._config)
            self._started_at = None
            if was_active:
                log.info("capture stopped interface=%s", self._config.interface)
            return self.status()

    def status(self) -> CaptureStatus:
        with self._lock:
            counters = self._base.plus(self._latest)
            interface = self._config.interface
            running = self._state == "running" and self._started_at is not None
            pid = (self._proc.pid if self._proc is not None and self._proc.poll() is None
                   else self._latest.pid if self._latest is not None else None)
            return CaptureStatus(
                status=self._state, interface=interface, promiscuous=self._config.promiscuous,
                snaplen=self._config.snaplen, bufferSize=self._config.bufferSize, autoStart=self._config.autoStart,
                agentId=agent_id_for(identity_of(interface, "").machine_id, "") if interface else None,
                packetCount=counters.packetCount, byteCount=counters.byteCount, droppedCount=counters.droppedCount,
                protocolStats=counters.protocolStats, skipped=counters.skipped,
                uptime=round(time.time() - self._started_at, 3) if running and self._started_at else 0.0,
                restarts=self._restarts, lastError=self._last_error,
                lastErrorAt=(dt.datetime.fromtimestamp(self._last_error_at, dt.timezone.utc).isoformat()
                             if self._last_error_at else None),
                pid=pid if self._active else None,
            )

    # -- internals -------------------------------------------------------------------------------
    def _record_error(self, message: str) -> None:
        self._last_error = message
        self._last_error_at = time.time()
        log.warning("capture error: %s", message)

    def _write_identity(self, interface: str) -> None:
        cert_pem, key_pem = self._issue(f"the appliance port {interface}")
        for name, data in ((CA_FILE, self._ca_pem), (CERT_FILE, cert_pem), (KEY_FILE, key_pem)):
            path = self._dir / name
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)

    def _write_spec(self, running: bool) -> None:
        self._generation += 1
        if self._config.interface is None:
            return
        target = self._target()
        spec = RunnerSpec(
            running=running, generation=self._generation, interface=self._config.interface,
            promiscuous=self._config.promiscuous, snaplen=self._config.snaplen,
            buffer_bytes=self._config.bufferSize * 1024 * 1024, target=target.address,
            server_name=target.server_name, insecure=target.insecure,
            internal_networks=list(self._options.internal_networks), version=self._version,
        )
        write_json(self._dir / SPEC_FILE, spec.model_dump())

    def _spawn(self) -> None:
        # A clean environment: the appliance's own (SENSOR_ADMIN_TOKEN, SENSOR_DEPLOY_TOKEN...) stays with it.
        env = {key: os.environ[key] for key in _CHILD_ENV if key in os.environ}
        env["PYTHONPATH"] = str(INSTALL_ROOT)
        self._proc = subprocess.Popen(
            [self._python, "-m", "appliance.capture", "--control-dir", str(self._dir)],
            cwd=INSTALL_ROOT, env=env, stdin=subprocess.DEVNULL, start_new_session=True,
        )
        self._proc_started = time.monotonic()
        log.info("capture process started pid=%d", self._proc.pid)

    def _end_process(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=8.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5.0)

    def _fold_counters(self) -> None:
        """Add the last process's counters to the base (it is gone; the next one counts from zero)."""
        self._base = self._base.plus(self._latest)
        self._latest = None

    def _on_link_problem(self, name: str, problem: str) -> None:
        with self._lock:
            if not self._active or name != self._config.interface:
                return
            self.events["link_errors"] += 1
            if "went down" in problem:
                time.sleep(0.1)  # a deletion closes the link first: tell the two apart
                try:
                    socket.if_nametoindex(name)
                except OSError:
                    problem = f"interface {name} vanished (netlink)"
            self._fail(problem)

    def _fail(self, problem: str) -> None:
        """The capture cannot go on: error state, process ended, autoStart kept (a restart tries again)."""
        self._record_error(problem)
        self._active = False
        self._state = "error"
        self._write_spec(False)
        self._end_process()
        self._fold_counters()

    def _watch(self) -> None:
        while not self._stop.wait(self._options.tick):
            try:
                with self._lock:
                    if self._active:
                        self._check()
            except Exception:  # the supervisor must outlive any surprise; the next tick tries again
                log.exception("capture supervisor tick failed")

    def _check(self) -> None:
        interface = self._config.interface or ""
        try:
            socket.if_nametoindex(interface)
        except OSError:  # the netlink event may have been missed (socket overrun): the same outcome
            self.events["link_errors"] += 1
            self._fail(f"interface {interface} no longer exists")
            return
        status = RunnerStatus.read(self._dir / STATUS_FILE)
        runner_error = ""
        if status is not None and status.generation == self._generation:
            if status.state == "running":
                self._latest = status
                if self._state == "error" and self._restart_at is None:
                    self._state = "running"
            elif status.state == "error" and status.error:
                runner_error = status.error
        if self._options.runner == "service":
            beat = status.heartbeat if status is not None else 0.0
            if time.time() - beat > self._options.heartbeat_timeout:
                if self._state != "error":
                    self._record_error(runner_error or "sensor-capture.service has not reported for "
                                       f"{self._options.heartbeat_timeout:.0f} s")
                self._state = "error"
            elif self._state == "error":
                self._state = "running"
            return
        now = time.monotonic()
        if self._restart_at is not None:
            if now >= self._restart_at:
                self._restart_at = None
                self._restarts += 1
                self._write_spec(True)
                self._spawn()
                self._state = "running"
            return
        proc = self._proc
        if proc is None or proc.poll() is None:
            if proc is not None and now - self._proc_started > self._options.backoff_max:
                self._backoff = self._options.backoff_initial  # it has run for a while: forgive the past
            return
        code = proc.returncode
        self.events["process_exits"] += 1
        self._proc = None
        if code == EXIT_NOT_PERMITTED:  # restarting cannot help: say so once and stay in error
            self._fail(runner_error or f"capture process {proc.pid} is not permitted to capture (no CAP_NET_RAW)")
            return
        how = f"signal {-code}" if code < 0 else f"exit code {code}"
        self._record_error(f"capture process {proc.pid} died ({how}); restarting in {self._backoff:.1f} s"
                           + (f": {runner_error}" if runner_error else ""))
        self._fold_counters()
        self._state = "error"
        self._restart_at = now + self._backoff
        self._backoff = min(self._backoff * 2, self._options.backoff_max)
