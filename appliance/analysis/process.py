"""AnalysisProcess: the server's side of the analysis process (`analysis.worker: process`, the default).

Ingestion (gRPC, the C fast path, the flow table) and analysis (DPI, signatures, behaviour,
correlation, the alert store) would share one interpreter lock in one process, so their costs would
add up. Here analysis runs in `python -m appliance.analysis.worker`, a process of its own on the other
core, fed through a socketpair:

- Ended flows go into a bounded, per-agent-fair outbox kept in C (`OutboxHandOff`, appliance/native/
  outbox.h: FairQueue's rules). A sender thread calls into it and stays there, without the interpreter
  lock, and writes flow record batches (proto/flow_record.proto) to the channel. It writes while the analysis
  process waits for frames, which it learns from a byte the process sends on a second socketpair before each
  wait (READY mode): what ends meanwhile waits in the outbox and goes at once when the process asks, and no
  producer wakes the sender across the CPUs. While the process waits, the sender gathers for a few milliseconds
  (GATHER) or until a batch is full, so frames are few and large (an agent's stream ending sends at once:
  `send_now`). It comes back to Python only to send a control message. When analysis falls behind, the outbox
  holds its bound and what does not fit is dropped and counted per agent: nothing ever blocks a gRPC stream.
- DNS answers and resolver events travel ahead of the flows that follow them (the resolver cache
  must know a name before the connection to its address is analysed).
- REST changes to the analysis config, exclusions and console settings are saved in SQLite by this
  process; a `reload` control message makes the analysis process read them. Rule files are watched
  by both processes (inotify). Triage needs nothing: the correlator reads open alerts from SQLite.
- The analysis process reports its counters a few times a second; the metrics add them up.
- A dead analysis process is noticed at once (end of its channel), logged, counted and started
  again with backoff; the flows it held are counted as lost. The flow table never notices.
- `drain` waits until the analysis process has analysed every flow handed over so far (shutdown:
  every flushed flow is analysed before exit, as with the thread).

The child is started with fork+exec (subprocess) before any gRPC object exists; restarts later are
safe for the same reason (exec right after fork, no Python runs in the forked gRPC process).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from typing import Any

from appliance.analysis.channel import CONTROL, STATS, Channel, ChannelClosed
from appliance.analysis.outbox import OutboxHandOff
from appliance.config import Settings
from appliance.cpus import pin_process

log = logging.getLogger(__name__)

# Flows per batch on the channel: large enough that framing and waking the other side are noise,
# small enough that a batch in flight (lost if the process dies) stays small.
BATCH_FLOWS = 256
# How long the sender gathers ended flows and DNS answers before it sends less than a batch. Sending what
# each ingest call handed over (about 20 flows) cost the server a wake-up and interpreter-lock hand-offs
# per frame, and the analysis process a wake-up per frame; a few milliseconds more before a flow is
# analysed are nothing beside its idle timeout. A drain sends at once.
GATHER = 0.004
RESTART_BACKOFF = (0.5, 10.0)  # first and longest wait before starting a dead analysis process again
START_TIMEOUT = 120.0  # a process that has not said it is ready by then is killed and started again
# With the analysis process pinned, the sending thread runs on its CPU, this much lower in priority than the process
# (nice increments): it needs no interpreter lock, so it costs the ingestion core nothing there, and behind analysis
# it writes the next frames when analysis waits for them. On the 2-core bench machine (2026-11-25 00:15-00:19 UTC,
# two runs of sixteen interleaved rounds, until every flow is analysed) 750,726-814,320 → 812,631-857,829 packets/s,
# medians; at the same priority as the process it was worse (it took the analysis CPU from analysis).
SENDER_BEHIND = 5


class AnalysisProcess(OutboxHandOff):
    """Flows, DNS answers and resolver events to the analysis process; its counters back."""

    mode = "process"

    def __init__(self, settings: Settings, queue_size: int, on_drop: Any = None, batch_flows: int = BATCH_FLOWS,
                 gather: float = GATHER) -> None:
        super().__init__(queue_size, on_drop, batch_flows, gather)
        self._settings_json = settings.model_dump_json()
        self._nice = settings.analysis.nice  # the analysis process's, relative to this one
        self._cond = threading.Condition()  # guards the fields below and wakes the sender
        self._proc: subprocess.Popen[bytes] | None = None
        self._channel: Channel | None = None
        self._ready_socket: socket.socket | None = None  # the analysis process's bytes saying it waits
        self._generation = 0
        self._ready = False
        self._reload_wanted = False
        self._drain_wanted = 0  # highest drain sequence asked for
        self._drain_sent = 0
        self._drained = 0  # highest drain sequence the process confirmed
        self._closing = False
        self._threads: list[threading.Thread] = []
        self._stats: dict[str, Any] = {}  # the running process's counters
        self._base: dict[str, int] = {}  # counters of processes that died: metrics never go backwards
        self.restarts = 0
        self.flows_lost = 0  # flows a dying process held (sent, never analysed)
        self._backoff = RESTART_BACKOFF[0]
        self._cpus: set[int] = set()  # the CPUs the process is pinned to (pin()); empty: wherever the kernel puts it

    # -- producers (the tracker, the gRPC streams: never block) ------------------------------------
    def reload(self) -> None:
        """The analysis config, exclusions or console settings changed in SQLite: have them read again."""
        with self._cond:
            self._reload_wanted = True
        self._outbox.poke()  # the sender comes back from C to send it

    # -- what the metrics read ----------------------------------------------------------------
    def counter(self, name: str) -> int:
        counters = self._stats.get("counters") or {}
        return self._base.get(name, 0) + int(counters.get(name, 0))

    def export_stats(self) -> dict[str, Any]:
        export = self._stats.get("export")
        return dict(export) if isinstance(export, dict) else {}

    def status(self) -> dict[str, Any]:
        proc = self._proc
        return {"mode": self.mode, "running": bool(self._ready and proc is not None and proc.poll() is None),
                "pid": proc.pid if proc is not None else 0, "restarts": self.restarts, "flows_lost": self.flows_lost,
                "dns_dropped": self.dns_dropped, "flows_not_analysed": 0,
                "frames_refused": self._base.get("frames_refused", 0) + int(self._stats.get("frames_refused", 0)),
                "signature_rules": int(self._stats.get("signature_rules", 0)),
                "signature_reloads": int(self._stats.get("signature_reloads", 0)), "cpus": sorted(self._cpus),
                "channel_buffer": channel.send_buffer() if (channel := self._channel) is not None else 0,
                "memory_reserved": int(self._stats.get("memory_reserved", 0))}

    # -- life cycle -----------------------------------------------------------------------------
    def spawn(self) -> None:
        """Start the analysis process (build(): before any gRPC object exists)."""
        with self._cond:
            self._spawn_locked()

    def _spawn_locked(self) -> None:
        channel, theirs = Channel.pair()
        # The analysis process's bytes saying it waits for frames (outbox.h, READY mode), read by the sending thread.
        ready, ready_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        ready.setblocking(False)
        ready_theirs.set_inheritable(True)
        level = logging.getLevelName(logging.getLogger().getEffectiveLevel())
        proc = subprocess.Popen(
            [sys.executable, "-m", "appliance.analysis.worker", "--channel-fd", str(theirs.fileno()),
             "--ready-fd", str(ready_theirs.fileno()), "--log-level", str(level)],
            stdin=subprocess.PIPE, pass_fds=(theirs.fileno(), ready_theirs.fileno()), close_fds=True,
        )
        theirs.close()
        ready_theirs.close()
        assert proc.stdin is not None
        try:
            proc.stdin.write(self._settings_json.encode())
            proc.stdin.close()
        except OSError:  # it died at once: the receiver notices and restarts it
            pass
        if self._cpus:
            try:  # its threads start later, from this one, and inherit the set
                pin_process(proc.pid, self._cpus)
            except OSError as err:  # it died at once (the receiver restarts it), or a filter refuses
                log.warning("analysis process pid=%d not pinned to CPUs %s: %s", proc.pid, sorted(self._cpus), err)
        if self._ready_socket is not None:
            self._ready_socket.close()
        self._proc, self._channel, self._ready_socket = proc, channel, ready
        self._generation += 1
        self._ready = False
        self._outbox.take_sent()  # from zero: what this process is handed
        self._drain_sent = 0
        self._reload_wanted = False  # a new process reads everything at start
        log.info("analysis process started pid=%d", proc.pid)

    def pin(self, cpus: set[int]) -> None:
        """Run the analysis process, and every one started after it, on `cpus` (OSError when not allowed)."""
        with self._cond:
            self._cpus = set(cpus)
            proc = self._proc
            if proc is not None and proc.poll() is None:  # else the next one is pinned as it starts
                try:
                    pin_process(proc.pid, cpus)
                except (FileNotFoundError, ProcessLookupError):  # it just died: the next one is pinned as it starts
                    pass
                except OSError:
                    self._cpus = set()
                    raise
        try:
            self._place_sender()
        except OSError:
            self._cpus = set()
            raise

    def _place_sender(self) -> None:
        """The sending thread onto the analysis process's CPUs, SENDER_BEHIND lower in priority than the process
        (OSError when the system refuses the move; the caller puts every thread back). When its priority cannot
        be lowered it stays where it was: at the process's priority or above it would take the analysis CPU
        from analysis."""
        sender = next((t for t in self._threads if t.name == "analysis-send"), None)
        tid = sender.native_id if sender is not None else None
        if not self._cpus or tid is None or not sender.is_alive():  # type: ignore[union-attr]
            return  # start() places it
        before = os.sched_getaffinity(tid)
        os.sched_setaffinity(tid, self._cpus)
        try:
            server = os.getpriority(os.PRIO_PROCESS, os.getpid())  # the main thread's (Linux: priorities are per thread)
            os.setpriority(os.PRIO_PROCESS, tid, min(server + self._nice + SENDER_BEHIND, 19))
        except OSError as err:
            os.sched_setaffinity(tid, before)
            log.warning("the sending thread stays on the server's CPUs: its priority could not be lowered (%s)", err)

    def start(self) -> None:
        if self._proc is None:
            self.spawn()
        self._closing = False
        self._outbox.reopen()
        for target, name in ((self._send_loop, "analysis-send"), (self._receive_loop, "analysis-receive")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        if self._cpus:  # pinned before it started
            try:
                self._place_sender()
            except OSError as err:  # it stays with the server's threads
                log.warning("the sending thread not moved to the analysis CPUs %s: %s", sorted(self._cpus), err)

    def drain(self, timeout: float = 60.0) -> bool:
        """Wait until every flow handed over so far has been analysed (or dropped, or lost with a process)."""
        deadline = time.monotonic() + timeout
        self._outbox.poke(flush=True)  # what waits goes now, without gathering
        if not self._outbox.wait_idle(timeout):
            return False
        with self._cond:
            self._drain_wanted += 1
            wanted = self._drain_wanted
        self._outbox.poke(want_idle=True)  # the sender comes back to send the drain once nothing waits
        with self._cond:
            return self._cond.wait_for(lambda: self._drained >= wanted or self._closing,
                                       max(deadline - time.monotonic(), 0)) and self._drained >= wanted

    def stop(self, timeout: float = 30.0) -> None:
        """Tell the process to finish (its queue is drained first by the caller) and wait for it."""
        with self._cond:
            self._closing = True
            proc, channel = self._proc, self._channel
            self._cond.notify_all()
        self._outbox.close()
        # The stop message goes after the sender's last frame, never inside it: the sender is joined first (a
        # sender blocked on a full channel whose process hangs is freed by the channel's close below).
        sender = next((t for t in self._threads if t.name == "analysis-send"), None)
        if sender is not None:
            sender.join(timeout=5)
        if channel is not None and (sender is None or not sender.is_alive()):
            try:
                channel.send_json(CONTROL, {"op": "stop"})
            except ChannelClosed:
                pass
        if proc is not None:
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log.error("analysis process pid=%d did not stop within %.0f s: killed", proc.pid, timeout)
                proc.kill()
                proc.wait(5)
        if channel is not None:
            channel.close()
        if self._ready_socket is not None:
            self._ready_socket.close()
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads.clear()

    # -- the sender ---------------------------------------------------------------------------------
    def _control(self) -> dict[str, Any] | None:
        """The control message to send before more frames, if any (under self._cond)."""
        if self._reload_wanted:
            self._reload_wanted = False
            return {"op": "reload"}
        if self._drain_wanted > self._drain_sent:
            if self._outbox.idle:  # after every flow handed over before the drain was asked for
                self._drain_sent = self._drain_wanted
                return {"op": "drain", "seq": self._drain_sent}
            self._outbox.poke(flush=True, want_idle=True)  # more came meanwhile: back here once they went
        return None

    def _send_loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._closing or (self._ready and self._channel is not None))
                if self._closing:
                    return
                channel, generation, ready = self._channel, self._generation, self._ready_socket
                assert channel is not None
                control = self._control()
            try:
                if control is not None:
                    channel.send_json(CONTROL, control)
                    continue
                # In C until asked back or the channel broke. On a duplicate of the descriptor: the channel's own
                # can be closed and its number reused for the next process's meanwhile; a shutdown of the channel
                # still ends a write blocked on this one.
                try:
                    fd = channel.sock.fileno()
                    if fd < 0:
                        raise ChannelClosed("closed")
                    mine = os.dup(fd)
                except OSError as err:
                    raise ChannelClosed(str(err)) from None
                ready_fd = -1
                try:
                    if ready is not None:  # a duplicate too, for the same reason
                        ready_fd = os.dup(ready.fileno())
                    lost, err = self._outbox.run(mine, ready_fd)
                except OSError as error:  # the ready socket closed under us: the process is gone
                    raise ChannelClosed(str(error)) from None
                finally:
                    os.close(mine)
                    if ready_fd >= 0:
                        os.close(ready_fd)
                if err:
                    with self._cond:
                        self.flows_lost += lost  # never written whole: not among what _restart counts
                    raise ChannelClosed(os.strerror(err))
            except ChannelClosed:
                if control is not None and control["op"] == "drain":
                    with self._cond:
                        self._drain_sent = 0  # asked again of the next process
                self._wait_for_generation(generation)

    def _wait_for_generation(self, dead: int) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._generation != dead or self._closing, 60)

    # -- the receiver and supervision -------------------------------------------------------------
    def _receive_loop(self) -> None:
        while True:
            with self._cond:
                channel, proc, generation = self._channel, self._proc, self._generation
            if channel is None or proc is None:
                return
            started = time.monotonic()
            # A process that says nothing for START_TIMEOUT after it was started is hung: the timed-out
            # read ends the channel like a death, and _restart kills it. Once it is ready, reads wait for ever
            # (the timeout is the socket's, so it is lifted before the sender writes anything).
            channel.sock.settimeout(START_TIMEOUT)
            try:
                while True:
                    kind, payload = channel.recv()
                    if kind == STATS:
                        if not self._ready:
                            channel.sock.settimeout(None)
                        self._take_stats(payload)
            except ChannelClosed:
                pass
            if self._closing:
                return
            self._restart(proc, channel, generation, started)

    def _take_stats(self, payload: bytes) -> None:
        stats = json.loads(payload)
        with self._cond:
            self._stats = stats
            if stats.get("ready") and not self._ready:
                self._ready = True
                self._backoff = RESTART_BACKOFF[0]
            drained = stats.get("drained", 0)
            if drained > self._drained:
                self._drained = drained
            self._cond.notify_all()

    def _restart(self, proc: subprocess.Popen[bytes], channel: Channel, generation: int, started: float) -> None:
        with self._cond:
            was_ready, self._ready = self._ready, False
        self._outbox.poke()  # the sender leaves the dead channel now: what comes next waits for the next process
        if not was_ready and proc.poll() is None:
            log.error("analysis process pid=%d did not become ready within %.0f s: killed", proc.pid, START_TIMEOUT)
            proc.kill()
        try:
            code = proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait(5)
        with self._cond:
            if self._closing:
                return
            processed = int(self._stats.get("flows_received", 0))
            lost = max(self._outbox.take_sent() - processed, 0)
            self.flows_lost += lost
            for name, value in (self._stats.get("counters") or {}).items():
                self._base[name] = self._base.get(name, 0) + int(value)
            self._base["frames_refused"] = self._base.get("frames_refused", 0) + int(self._stats.get("frames_refused", 0))
            self._stats = {}
            self.restarts += 1
            wait = self._backoff
            self._backoff = min(self._backoff * 2, RESTART_BACKOFF[1])
        channel.close()
        log.error("analysis process pid=%d exited with code %s after %.1f s; %d flows it held are lost; "
                  "starting it again in %.1f s (restart %d)", proc.pid, code, time.monotonic() - started, lost, wait,
                  self.restarts)
        time.sleep(wait)
        with self._cond:
            if self._closing:
                return
            self._spawn_locked()
            self._cond.notify_all()
