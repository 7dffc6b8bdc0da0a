"""Process start/exit events on Linux by scanning /proc (no kernel hooks needed)."""

from __future__ import annotations

import logging
import os
import pwd
import threading
import time
from pathlib import Path
from typing import Protocol

from agents.model import ProcessEvent

log = logging.getLogger(__name__)


class EventSink(Protocol):
    def submit(self, item: ProcessEvent, block: bool = False) -> None: ...


def _read(path: Path) -> str:
    try:
        return path.read_bytes().decode(errors="replace")
    except OSError:
        return ""


def describe_process(proc: Path, pid: int, now_ms: int) -> ProcessEvent | None:
    """A START event for a live pid; None when it vanished meanwhile."""
    base = proc / str(pid)
    stat = _read(base / "stat")
    if not stat:
        return None
    # comm may contain spaces and parentheses: the fields after it follow the last ')'.
    name = stat[stat.find("(") + 1 : stat.rfind(")")]
    rest = stat[stat.rfind(")") + 2 :].split()
    ppid = int(rest[1]) if len(rest) > 1 and rest[1].isdigit() else 0
    try:
        path = os.readlink(base / "exe")
    except OSError:
        path = ""
    command = _read(base / "cmdline").replace("\x00", " ").strip()
    try:
        uid = (base).stat().st_uid
        user = pwd.getpwuid(uid).pw_name
    except (OSError, KeyError):
        user = ""
    return ProcessEvent("start", now_ms, pid, ppid, name, path, command[:8192], user)


class ProcessWatcher:
    """Diffs the pid set every `interval` seconds and submits START and EXIT events."""

    def __init__(self, sink: EventSink, interval: float, stop: threading.Event, proc: Path = Path("/proc")) -> None:
        self._sink = sink
        self._interval = interval
        self._stop = stop
        self._proc = proc
        self._known: dict[int, str] = {}

    def pids(self) -> set[int]:
        return {int(e.name) for e in os.scandir(self._proc) if e.name.isdigit()}

    def scan(self, report: bool = True) -> None:
        now_ms = time.time_ns() // 1_000_000
        current = self.pids()
        for pid in sorted(current - self._known.keys()):
            event = describe_process(self._proc, pid, now_ms)
            if event is None:
                continue
            self._known[pid] = event.name
            if report:
                self._sink.submit(event)
        for pid in sorted(self._known.keys() - current):
            # /proc keeps no exit status of other processes' children: exit_code stays 0 (unknown).
            name = self._known.pop(pid)
            if report:
                self._sink.submit(ProcessEvent("exit", now_ms, pid, name=name))

    def run(self) -> None:
        # The processes running at start-up are reported once, as starts, so the appliance has a baseline.
        while not self._stop.is_set():
            try:
                self.scan()
            except OSError as err:
                log.warning("process scan failed: %s", err)
            self._stop.wait(self._interval)
