"""AnalysisProcess: the server's side of the analysis process (`analysis.worker: process`, the default).

Ingestion (gRPC, the C fast path, the flow table) and analysis (DPI, signatures, behaviour,
correlation, the alert store) would share one interpreter lock in one process, so their costs would
add up. Here analysis runs in `python -m appliance.analysis.worker`, a process of its own on the other
core, fed through a socketpair:

- Ended flows go into a bounded, per-agent-fair queue (`FairQueue`); a sender thread takes rounds of
  it, encodes them as flow record batches (proto/flow_record.proto) and writes them to the channel.
  It gathers for a few milliseconds (GATHER) or until a batch is full, so frames are few and large.
  When analysis falls behind the socket fills, the sender waits, the queue holds its bound and what
  does not fit is dropped and counted per agent: nothing ever blocks a gRPC stream.
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
import subprocess
import sys
import threading
import time
from typing import Any

from appliance.analysis.channel import CONTROL, DNS, FLOWS, STATS, Channel, ChannelClosed
from appliance.analysis.fair_queue import QueuedHandOff
from appliance.config import Settings
from appliance.cpus import pin_process
from appliance.flows import record_codec

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


class AnalysisProcess(QueuedHandOff):
    """Flows, DNS answers and resolver events to the analysis process; its counters back."""

    mode = "process"

    def __init__(self, settings: Settings, queue_size: int, on_drop: Any = None, batch_flows: int = BATCH_FLOWS,
                 gather: float = GATHER) -> None:
        super().__init__(queue_size, on_drop, wake_at=batch_flows)
        self._settings_json = settings.model_dump_json()
        self._batch = batch_flows
        self._gather = gather
        self._cond = threading.Condition()  # guards the fields below and wakes the sender
        self._proc: subprocess.Popen[bytes] | None = None
        self._channel: Channel | None = None
        self._generation = 0
        self._ready = False
        self._reload_wanted = False
        self._drain_wanted = 0  # highest drain sequence asked for
        self._drain_sent = 0
        self._drained = 0  # highest drain sequence the process confirmed
        self._gather_until = 0.0  # while gathering: when to send what is pending, batch or not (0: not gathering)
        self._flush = False  # a drain waits: send what is pending without gathering
        self._closing = False
        self._threads: list[threading.Thread] = []
        self._stats: dict[str, Any] = {}  # the running process's counters
        self._base: dict[str, int] = {}  # counters of processes that died: metrics never go backwards
        self._sent_flows = 0  # flows handed to the running process
        self.restarts = 0
        self.flows_lost = 0  # flows a dying process held (sent, never analysed)
        self._backoff = RESTART_BACKOFF[0]
        self._cpus: set[int] = set()  # the CPUs the process is pinned to (pin()); empty: wherever the kernel puts it

    # -- producers (the tracker, the gRPC streams: never block) ------------------------------------
    def reload(self) -> None:
        """The analysis config, exclusions or console settings changed in SQLite: have them read again."""
        with self._queue.cond:
            self._reload_wanted = True
            self._queue.cond.notify_all()

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
                "channel_buffer": channel.send_buffer() if (channel := self._channel) is not None else 0}

    # -- life cycle -----------------------------------------------------------------------------
    def spawn(self) -> None:
        """Start the analysis process (build(): before any gRPC object exists)."""
        with self._cond:
            self._spawn_locked()

    def _spawn_locked(self) -> None:
        channel, theirs = Channel.pair()
        level = logging.getLevelName(logging.getLogger().getEffectiveLevel())
        proc = subprocess.Popen(
            [sys.executable, "-m", "appliance.analysis.worker", "--channel-fd", str(theirs.fileno()), "--log-level", str(level)],
            stdin=subprocess.PIPE, pass_fds=(theirs.fileno(),), close_fds=True,
        )
        theirs.close()
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
        self._proc, self._channel = proc, channel
        self._generation += 1
        self._ready = False
        self._sent_flows = 0
        self._drain_sent = 0
        self._reload_wanted = False  # a new process reads everything at start
        log.info("analysis process started pid=%d", proc.pid)

    def pin(self, cpus: set[int]) -> None:
        """Run the analysis process, and every one started after it, on `cpus` (OSError when not allowed)."""
        with self._cond:
            self._cpus = set(cpus)
            proc = self._proc
            if proc is None or proc.poll() is not None:
                return  # the next one is pinned as it starts
            try:
                pin_process(proc.pid, cpus)
            except (FileNotFoundError, ProcessLookupError):  # it just died: the next one is pinned as it starts
                pass
            except OSError:
                self._cpus = set()
                raise

    def start(self) -> None:
        if self._proc is None:
            self.spawn()
        self._closing = False
        for target, name in ((self._send_loop, "analysis-send"), (self._receive_loop, "analysis-receive")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def drain(self, timeout: float = 60.0) -> bool:
        """Wait until every flow handed over so far has been analysed (or dropped, or lost with a process)."""
        deadline = time.monotonic() + timeout
        with self._queue.cond:
            self._flush = True
            self._queue.cond.notify_all()
        if not self._queue.wait_idle(timeout):
            return False
        with self._queue.cond:
            self._drain_wanted += 1
            wanted = self._drain_wanted
            self._queue.cond.notify_all()
        with self._cond:
            return self._cond.wait_for(lambda: self._drained >= wanted or self._closing,
                                       max(deadline - time.monotonic(), 0)) and self._drained >= wanted

    def stop(self, timeout: float = 30.0) -> None:
        """Tell the process to finish (its queue is drained first by the caller) and wait for it."""
        with self._cond:
            self._closing = True
            proc, channel = self._proc, self._channel
            self._cond.notify_all()
        self._queue.close()
        if channel is not None:
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
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads.clear()

    # -- the sender ---------------------------------------------------------------------------------
    def _next_work(self) -> tuple[str, Any] | None:
        """What to send next, in order of precedence; None once closing with nothing left."""
        cond, queue = self._queue.cond, self._queue
        with cond:
            while True:
                if self._closing:
                    return None
                wait = 0.5
                if self._ready:
                    if self._reload_wanted:
                        self._reload_wanted = False
                        return "reload", None
                    if self._dns or queue.depth:
                        now = time.monotonic()
                        if not self._gather_until:
                            self._gather_until = now + self._gather
                        if (now >= self._gather_until or self._flush or queue.depth >= self._batch
                                or len(self._dns) >= self._batch):
                            # DNS answers first: they go ahead of the flows they explain.
                            if self._dns:
                                items = list(self._dns)
                                self._dns.clear()
                                return "dns", items
                            flows = queue.take_round(self._batch, timeout=0)
                            if flows:
                                self._gather_until = 0.0  # what comes next is gathered afresh
                                return "flows", flows
                        wait = self._gather_until - now
                    else:
                        self._gather_until = 0.0
                        self._flush = False
                        if self._drain_wanted > self._drain_sent and queue.idle:
                            self._drain_sent = self._drain_wanted
                            return "drain", self._drain_sent
                cond.wait(wait)

    def _send_loop(self) -> None:
        while True:
            work = self._next_work()
            if work is None:
                return
            kind, item = work
            counted = False
            with self._cond:
                channel, generation = self._channel, self._generation
            try:
                if channel is None:
                    raise ChannelClosed("no analysis process")
                if kind == "flows":
                    payload = record_codec.encode(item)
                    with self._cond:
                        counted = generation == self._generation  # in _sent_flows: what _restart counts as lost
                        if counted:
                            self._sent_flows += len(item)
                    channel.send(FLOWS, payload)
                elif kind == "dns":
                    channel.send(DNS, record_codec.encode_dns(item))
                elif kind == "reload":
                    channel.send_json(CONTROL, {"op": "reload"})
                else:
                    channel.send_json(CONTROL, {"op": "drain", "seq": item})
            except ChannelClosed:
                # The process died with this batch unsent. Its flows are counted lost once: by _restart when they were
                # in _sent_flows and it came first, else here.
                if kind == "flows":
                    with self._cond:
                        if counted and generation == self._generation:
                            self._sent_flows -= len(item)
                        if not counted or generation == self._generation:
                            self.flows_lost += len(item)
                elif kind == "drain":
                    with self._queue.cond:
                        self._drain_sent = 0  # asked again of the next process
                self._wait_for_generation(generation)
            finally:
                if kind == "flows":
                    self._queue.done(len(item))

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
                with self._queue.cond:
                    self._queue.cond.notify_all()
            drained = stats.get("drained", 0)
            if drained > self._drained:
                self._drained = drained
            self._cond.notify_all()

    def _restart(self, proc: subprocess.Popen[bytes], channel: Channel, generation: int, started: float) -> None:
        if not self._ready and proc.poll() is None:
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
            lost = max(self._sent_flows - processed, 0)
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
        with self._queue.cond:
            self._queue.cond.notify_all()
