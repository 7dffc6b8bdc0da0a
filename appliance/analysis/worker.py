"""`python -m appliance.analysis.worker --channel-fd N`: the analysis process.

Started by the server (`analysis.process.AnalysisProcess`), never by hand: it reads the server's
settings as JSON on stdin, opens the detection database, wires the analysis stack with the same
recipe as the in-process thread (`app.build_analysis`) and then serves the channel: flow record
batches are analysed in order, DNS batches feed the resolver cache and the DNS layers, control
messages reload the stores or confirm a drain. Its counters go back a few times a second.

SIGTERM and SIGINT are ignored: systemd and a terminal signal the whole group, and this process must
keep analysing the flows the server flushes while it shuts down. It exits when told to stop, or when
the server's end of the channel closes (the server died).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from typing import Any

from appliance.analysis.channel import CONTROL, DNS, FLOWS, STATS, Channel, ChannelClosed
from appliance.analysis.local import analysis_counters
from appliance.analysis.memory import reserve as reserve_memory
from appliance.config import parse_settings
from appliance.detection import SAMPLED_PROTOCOLS
from appliance.flows import record_codec

log = logging.getLogger("appliance.analysis.worker")

STATS_EVERY = 0.25  # seconds between counter reports while anything changes
# A round's alerts are committed when no frame waits behind it, else once the oldest uncommitted round is this old
# (seconds): frames that queue
# while analysis is busy (the ends of many streams at once) share one commit instead of one each (0.05-0.27 ms,
# docs/figures.md 2026-12-02). The saves wait in memory meanwhile, never in an open transaction (AlertStore).
COMMIT_EVERY = 0.05
_SAMPLED = record_codec.sample_mask(SAMPLED_PROTOCOLS)


class Worker:
    """One analysis process: the stack and the loop that feeds it from the channel."""

    def __init__(self, channel: Channel, settings: Any, memory_reserved: int = 0,
                 ready: socket.socket | None = None) -> None:
        from appliance.app import build_analysis, open_stores  # the composition recipe shared with the thread

        self.channel = channel
        # The server's sending thread writes while this process waits, and learns that it waits from a byte here
        # (outbox.h, READY mode): sent before each wait for a frame, on the same CPU as that thread.
        self.ready = ready
        self.settings = settings
        self.stores = open_stores(settings, batched_alerts=True)
        self.parts, self.pipeline = build_analysis(settings, self.stores, tls_views=False)
        self.memory_reserved = memory_reserved  # bytes touched at start-up (analysis.memory.reserve)
        self.flows_received = 0
        self._uncommitted_since = 0.0  # monotonic time of the first round not committed yet (0: none)
        self.frames_refused = 0  # frames that did not decode (a bug on the other side): counted, skipped
        self._send_lock = threading.Lock()
        self.stopped = threading.Event()  # set when serve() ends: the process's helper threads stop with it

    def report(self, **extra: Any) -> None:
        signatures = self.parts.signatures
        body = {"ready": True, "flows_received": self.flows_received, "frames_refused": self.frames_refused,
                "memory_reserved": self.memory_reserved,
                "signature_rules": signatures.loaded, "signature_reloads": signatures.reloads,
                "counters": {k: v for k, v in analysis_counters(self.parts, self.pipeline).items() if isinstance(v, int)},
                "export": self.parts.exporter.stats() if self.parts.exporter is not None else {}, **extra}
        with self._send_lock:
            self.channel.send_json(STATS, body)

    def _report_loop(self) -> None:
        last: tuple[int, ...] | None = None
        while not self.stopped.wait(STATS_EVERY):
            now = (self.flows_received, self.pipeline.alerts_generated, self.parts.signatures.reloads)
            if now != last:
                try:
                    self.report()
                except ChannelClosed:
                    return
                last = now

    def serve(self) -> None:
        self.parts.watcher.start()
        if self.parts.exporter is not None:
            self.parts.exporter.start()
        reporter = threading.Thread(target=self._report_loop, name="analysis-report", daemon=True)
        reporter.start()
        self.report()
        try:
            while True:
                if self.ready is not None and not self.channel.waiting():
                    self._say_ready()
                kind, payload = self.channel.recv()
                if kind == FLOWS:
                    self._flows(payload)
                    self._round_done()
                elif kind == DNS:
                    self._dns(payload)
                    self._round_done()
                elif kind == CONTROL:
                    body = _control(payload)
                    if body is None:
                        self.frames_refused += 1
                        continue
                    op = body.get("op")
                    if op == "reload":
                        self.reload()
                    elif op == "drain" and isinstance(body.get("seq"), int):
                        self._commit()  # drained: every alert of what was sent before is in the database
                        if self.parts.exporter is not None:
                            self.parts.exporter.flush()
                        self.report(drained=body["seq"])
                    elif op == "stop":
                        break
                    else:
                        self.frames_refused += 1
                else:
                    self.frames_refused += 1
        except ChannelClosed:
            log.warning("the server's end of the analysis channel closed: exiting")
        finally:
            self._commit()
            self.stopped.set()
            self.parts.watcher.stop()
            if self.parts.exporter is not None:
                self.parts.exporter.stop()
            self.stores.db.close()

    def _say_ready(self) -> None:
        try:
            self.ready.send(b"r")  # type: ignore[union-attr]
        except (BlockingIOError, InterruptedError):  # bytes not read yet say the same
            pass
        except OSError:  # the server's end closed: the channel says so next
            self.ready = None

    def _round_done(self) -> None:
        """A frame analysed: its alerts committed now, unless another frame already waits and the oldest round not
        committed is younger than COMMIT_EVERY."""
        now = time.monotonic()
        if not self._uncommitted_since:
            self._uncommitted_since = now
        if self.channel.waiting() and now - self._uncommitted_since < COMMIT_EVERY:
            self.stores.alerts.next_round()
        else:
            self._commit()

    def _commit(self) -> None:
        self.stores.alerts.commit()
        self._uncommitted_since = 0.0

    def _flows(self, payload: bytes) -> None:
        try:
            flows = record_codec.decode(payload, _SAMPLED)
        except record_codec.RecordError:
            self.frames_refused += 1
            log.exception("flow record batch refused")
            return
        if self.parts.exporter is not None:
            self.parts.exporter.flows(flows)
        self.pipeline.process_all(flows)
        self.flows_received += len(flows)

    def _dns(self, payload: bytes) -> None:
        try:
            self.pipeline.observe_dns_batch(payload, self.parts.resolver)
        except record_codec.RecordError:
            self.frames_refused += 1

    def reload(self) -> None:
        """Read what the server changed in SQLite: analysis config, exclusions, console settings."""
        self.stores.config.reload(self.settings.analysis.detectors)
        self.stores.exclusions.reload()
        self.stores.console_settings.reload()
        log.info("analysis config, exclusions and console settings reloaded")


def _control(payload: bytes) -> dict[str, Any] | None:
    try:
        body = json.loads(payload)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="appliance.analysis.worker")
    parser.add_argument("--channel-fd", type=int, required=True)
    parser.add_argument("--ready-fd", type=int, default=-1)
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    channel = Channel(socket.socket(fileno=args.channel_fd))
    settings = parse_settings(json.loads(sys.stdin.read()), "the server")
    if settings.analysis.nice:
        try:  # lowering one's own priority needs no privilege (the shipped unit's system call filter allows it)
            os.nice(settings.analysis.nice)
        except OSError as err:  # a filter that answers EPERM: analysis still runs, at the server's priority
            log.warning("analysis.nice %d not applied: %s", settings.analysis.nice, err)
    started = time.monotonic()
    reserved = reserve_memory(settings.analysis.memory_prefault_mb)  # before the stack: its allocations come from it too
    ready = None
    if args.ready_fd >= 0:
        ready = socket.socket(fileno=args.ready_fd)
        ready.setblocking(False)
    worker = Worker(channel, settings, sum(reserved), ready)
    log.info("analysis process ready in %.1f s", time.monotonic() - started)
    from appliance.app import tune_analysis_garbage_collector

    tune_analysis_garbage_collector(worker.stopped)
    worker.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
