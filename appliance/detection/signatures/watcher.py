"""SignatureWatcher: inotify on the signatures directory, reload 500 ms after the last change."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from inotify_simple import INotify, flags

from appliance.detection.signatures.rules import SUFFIXES

log = logging.getLogger(__name__)

_MASK = (flags.CREATE | flags.CLOSE_WRITE | flags.MODIFY | flags.DELETE | flags.MOVED_TO | flags.MOVED_FROM
         | flags.ATTRIB)


class SignatureWatcher:
    """Debounced: a burst of edits causes one reload, `debounce_s` after the last event."""

    def __init__(self, directory: Path, reload: Callable[[], object], debounce_s: float = 0.5) -> None:
        self.directory = directory
        self._reload = reload
        self.debounce_s = debounce_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._inotify: INotify | None = None
        self.reloads_triggered = 0

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._inotify = INotify()
        self._inotify.add_watch(str(self.directory), _MASK)
        self._thread = threading.Thread(target=self._run, name="signature-watcher", daemon=True)
        self._thread.start()

    @staticmethod
    def _relevant(name: str) -> bool:
        return not name.startswith(".") and name.endswith(SUFFIXES)

    def _run(self) -> None:
        assert self._inotify is not None
        deadline: float | None = None
        while not self._stop.is_set():
            wait_ms = 100 if deadline is None else max(1, min(100, int((deadline - time.monotonic()) * 1000)))
            events = self._inotify.read(timeout=wait_ms)
            if any(self._relevant(e.name) for e in events):
                deadline = time.monotonic() + self.debounce_s
            if deadline is not None and time.monotonic() >= deadline:
                deadline = None
                self.reloads_triggered += 1
                try:
                    self._reload()
                except Exception:  # the watcher must outlive one bad reload
                    log.exception("signature reload raised")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._inotify is not None:
            self._inotify.close()
