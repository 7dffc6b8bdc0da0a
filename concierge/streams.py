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
from concierge.pubsub import Event, PubSub, Subscription

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
        self.events_caught_up = 0  # events pub/sub did not deliver, sent from the replay buffer instead

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

        Every event newer than the connection (or than Last-Event-ID) is sent once, in id order, even when
        pub/sub loses one (a subscription acknowledged late, the listener reconnecting after Redis went
        away): ids are per channel and consecutive, so a live event past the next id, or a heartbeat
        finding the channel's newest id ahead of what was sent, first sends what is missing from the
        replay buffer (`recent`; counted in `events_caught_up`).

        The slot must already be acquired; it is released when the generator ends, including when a
        write to a dead client fails and the server closes the generator.
        """
        latest = self.pubsub.latest(channel)  # before subscribing: anything newer arrives live or is caught up
        sub = self.pubsub.subscribe(channel)
        with self._lock:
            self._subs.add(sub)
        try:
            yield format_event("ready", json.dumps({"connected": True}))
            # A Last-Event-ID past the channel's newest (its counter started again) resumes from now.
            sent = last_event_id if last_event_id is not None and last_event_id <= latest else latest
            for old in self._missing(channel, sent, None):
                yield format_event(event, old.data, old.id)
                sent = old.id
            while not self._closing.is_set():
                item = sub.get(timeout=self.heartbeat)
                if self._closing.is_set():
                    return
                if item is None:
                    if self.pubsub.latest(channel) > sent:  # published, never delivered here
                        for old in self._caught_up(channel, sent, None):
                            yield format_event(event, old.data, old.id)
                            sent = old.id
                    yield b": heartbeat\n\n"  # also how a vanished client is noticed: the write fails
                    continue
                if item.id <= sent:
                    continue  # already sent
                if item.id > sent + 1:
                    for old in self._caught_up(channel, sent, item.id):
                        yield format_event(event, old.data, old.id)
                        sent = old.id
                sent = item.id
                yield format_event(event, item.data, item.id)
        finally:
            with self._lock:
                self._subs.discard(sub)
            sub.close()
            self.release(user_id)
            log.info("sse stream closed user=%s channel=%s", user_id, channel)

    def _missing(self, channel: str, after: int, before: int | None) -> list[Event]:
        """Events of the replay buffer with after < id < before, in id order."""
        return [e for e in self.pubsub.recent(channel, after) if before is None or e.id < before]

    def _caught_up(self, channel: str, after: int, before: int | None) -> list[Event]:
        missing = self._missing(channel, after, before)
        if missing:
            with self._lock:
                self.events_caught_up += len(missing)
            log.info("sse stream caught up channel=%s events=%d after=%d", channel, len(missing), after)
        return missing

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
