"""Link events from netlink: tells the supervisor when its interface goes down or vanishes."""

from __future__ import annotations

import logging
import select
import threading
from collections.abc import Callable

from appliance.capture.interfaces import IFF_UP

log = logging.getLogger(__name__)


class LinkWatcher:
    """A thread subscribed to RTM_NEWLINK/RTM_DELLINK; calls `on_change(name, problem)` for links going away."""

    def __init__(self, on_change: Callable[[str, str], None]) -> None:
        self._on_change = on_change
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="capture-linkwatch", daemon=True)
        self._thread.start()
        self._ready.wait(5.0)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    def _run(self) -> None:
        from pyroute2 import IPRoute

        try:
            ipr = IPRoute()
            ipr.bind()
        except OSError as err:
            log.error("capture link watch unavailable: %s", err)
            self._ready.set()
            return
        self._ready.set()
        try:
            while not self._stop.is_set():
                readable, _, _ = select.select([ipr.fileno()], [], [], 0.25)
                if not readable:
                    continue
                # A deleted link is first closed (RTM_NEWLINK without IFF_UP), then RTM_DELLINK'd: within
                # one read the deletion wins, so the message says what really happened.
                problems: dict[str, str] = {}
                for message in ipr.get():
                    event = message.get("event")
                    name = message.get_attr("IFLA_IFNAME")
                    if not name or event not in ("RTM_NEWLINK", "RTM_DELLINK"):
                        continue
                    if event == "RTM_DELLINK":
                        problems[name] = f"interface {name} vanished (netlink RTM_DELLINK)"
                    elif not int(message["flags"]) & IFF_UP:
                        problems.setdefault(name, f"interface {name} went down (netlink RTM_NEWLINK without IFF_UP)")
                    else:
                        problems.pop(name, None)
                for name, problem in problems.items():
                    self._on_change(name, problem)
        except Exception:  # the watch is a safety net: log once, the periodic existence check remains
            log.exception("capture link watch failed")
        finally:
            ipr.close()
