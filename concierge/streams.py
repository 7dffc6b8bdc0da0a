"""Server-sent event streams: caps, event ids, Last-Event-ID resume, heartbeats, dead-client release.

cheroot holds one worker thread per open stream, so the hub caps streams per user and overall and the
server's pool is sized as `max_total + request_threads`: ordinary requests always have threads left.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any, Iterator

from concierge.errors import ServiceUnavailable
from concierge.pubsub import PubSub, Subscription

log = logging.getLogger(__name__)


def format_event(event: str, data: str, event_id: int | None = None) -> bytes:
    """One SSE frame; `data` is JSON text on a single line."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {data}\n\n".encode()


class StreamHub:
    """Counts open streams and produces their frames."""

    def __init__(self, pubsub: PubSub, heartbeat: float, max_per_user: int, max_total: int) -> None:
        self.pubsub = pubsub
        self.heartbeat = heartbeat
        self.max_per_user = max_per_user
        self.max_total = max_total
        self._lock = threading.Lock()
        self._per_user: dict[str, int] = {}
        self._total = 0
        self._closing = threading.Event()
        self._subs: set[Subscription] = set()

    @property
    def open_streams(self) -> int:
        with self._lock:
            return self._total

    def acquire(self, user_id: str) -> None:
        """Reserve a stream slot or raise 503 (Retry-After) when a cap is reached."""
        with self._lock:
            if self._total >= self.max_total:
                raise ServiceUnavailable("Too many open streams on this server, retry later", retry_after=10)
            if self._per_user.get(user_id, 0) >= self.max_per_user:
                raise ServiceUnavailable(f"At most {self.max_per_user} open streams per user", retry_after=10)
            self._per_user[user_id] = self._per_user.get(user_id, 0) + 1
            self._total += 1

    def release(self, user_id: str) -> None:
        with self._lock:
            left = self._per_user.get(user_id, 1) - 1
            if left <= 0:
                self._per_user.pop(user_id, None)
            else:
                self._per_user[user_id] = left
            self._total -= 1

    def stream(self, user_id: str, channel: str, last_event_id: int | None, event: str = "status") -> Iterator[bytes]:
        """Frames for one client: `ready`, replayed events after Last-Event-ID, then live events.

        The slot must already be acquired; it is released when the generator ends, including when a
        write to a dead client fails and the server closes the generator.
        """
        sub = self.pubsub.subscribe(channel)  # before replay, so nothing falls between the two
        with self._lock:
            self._subs.add(sub)
        try:
            yield format_event("ready", json.dumps({"connected": True}))
            sent = 0
            if last_event_id is not None:
                for old in self.pubsub.recent(channel, last_event_id):
                    yield format_event(event, old.data, old.id)
                    sent = old.id
            while not self._closing.is_set():
                item = sub.get(timeout=self.heartbeat)
                if self._closing.is_set():
                    return
                if item is None:
                    yield b": heartbeat\n\n"  # also how a vanished client is noticed: the write fails
                    continue
                if item.id <= sent:
                    continue  # already replayed
                sent = item.id
                yield format_event(event, item.data, item.id)
        finally:
            with self._lock:
                self._subs.discard(sub)
            sub.close()
            self.release(user_id)
            log.info("sse stream closed user=%s channel=%s", user_id, channel)

    def close(self) -> None:
        """Ends every stream at its next wake-up (server shutdown)."""
        self._closing.set()
        with self._lock:
            subs = list(self._subs)
        for sub in subs:
            sub.wake()


def parse_last_event_id(raw: str | None) -> int | None:
    if raw is None or not raw.strip().isdigit():
        return None
    return int(raw.strip())
