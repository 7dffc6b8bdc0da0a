"""Named channels carrying JSON payloads: in-process (embedded default) or Redis pub/sub (several instances).

`publish(channel, payload)` serialises the payload as JSON, gives it the channel's next event id and keeps
it in a short replay buffer; `subscribe(channel)` returns a `Subscription` whose `get(timeout)` yields
`Event`s in order. `recent(channel, after)` serves `Last-Event-ID` resumes.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Protocol

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Event:
    """One published payload with its per-channel, increasing id."""

    id: int
    channel: str
    data: str  # the JSON text, exactly as published

    def payload(self) -> Any:
        return json.loads(self.data)


class Subscription:
    """A subscriber's queue; `close()` detaches it from its channel."""

    def __init__(self, channel: str, on_close: Callable[[Subscription], None]) -> None:
        self.channel = channel
        self._queue: queue.SimpleQueue[Event | None] = queue.SimpleQueue()
        self._on_close = on_close
        self.closed = False

    def deliver(self, event: Event) -> None:
        self._queue.put(event)

    def wake(self) -> None:
        """Make a blocked `get` return None now (shutdown)."""
        self._queue.put(None)

    def get(self, timeout: float) -> Event | None:
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def __iter__(self) -> Iterator[Any]:
        """The payloads, in order, until the subscription is closed (blocking)."""
        while not self.closed:
            event = self.get(timeout=1.0)
            if event is not None:
                yield event.payload()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._on_close(self)


class PubSub(Protocol):
    def publish(self, channel: str, payload: Any) -> int: ...
    def subscribe(self, channel: str) -> Subscription: ...
    def recent(self, channel: str, after: int) -> list[Event]: ...
    def latest(self, channel: str) -> int: ...
    def close(self) -> None: ...


class _Fanout:
    """Local subscribers per channel (shared by both back ends)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.subscribers: dict[str, set[Subscription]] = {}

    def add(self, sub: Subscription) -> bool:
        """Adds; True when this is the channel's first local subscriber."""
        with self.lock:
            subs = self.subscribers.setdefault(sub.channel, set())
            subs.add(sub)
            return len(subs) == 1

    def remove(self, sub: Subscription) -> bool:
        """Removes; True when the channel has no local subscriber left."""
        with self.lock:
            subs = self.subscribers.get(sub.channel)
            if subs is None:
                return False
            subs.discard(sub)
            if not subs:
                del self.subscribers[sub.channel]
                return True
            return False

    def deliver(self, event: Event) -> None:
        with self.lock:
            targets = list(self.subscribers.get(event.channel, ()))
        for sub in targets:
            sub.deliver(event)


class InProcessPubSub:
    """Channels inside one process; ids and replay buffers kept in memory."""

    def __init__(self, replay_size: int = 100) -> None:
        self._fanout = _Fanout()
        self._lock = threading.Lock()
        self._seq: dict[str, int] = {}
        self._recent: dict[str, deque[Event]] = {}
        self._replay_size = replay_size

    def publish(self, channel: str, payload: Any) -> int:
        data = json.dumps(payload, separators=(",", ":"))
        with self._lock:
            seq = self._seq.get(channel, 0) + 1
            self._seq[channel] = seq
            event = Event(seq, channel, data)
            self._recent.setdefault(channel, deque(maxlen=self._replay_size)).append(event)
        self._fanout.deliver(event)
        return seq

    def subscribe(self, channel: str) -> Subscription:
        sub = Subscription(channel, self._unsubscribe)
        self._fanout.add(sub)
        return sub

    def _unsubscribe(self, sub: Subscription) -> None:
        self._fanout.remove(sub)

    def recent(self, channel: str, after: int) -> list[Event]:
        with self._lock:
            return [e for e in self._recent.get(channel, ()) if e.id > after]

    def latest(self, channel: str) -> int:
        """The id of the channel's newest event (0: none yet)."""
        with self._lock:
            return self._seq.get(channel, 0)

    def close(self) -> None:
        pass


# Publishes atomically: next id from a counter, envelope kept in a capped list, then PUBLISH.
_PUBLISH_LUA = """
local id = redis.call('INCR', KEYS[1])
local envelope = cjson.encode({id = id, data = ARGV[1]})
redis.call('LPUSH', KEYS[2], envelope)
redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[2]) - 1)
redis.call('EXPIRE', KEYS[2], 86400)
redis.call('PUBLISH', ARGV[3], envelope)
return id
"""


class RedisPubSub:
    """Redis pub/sub: every instance subscribed to a channel receives every publish, from any instance.

    One listener thread per process reads the Redis subscription and fans out locally; a Redis channel is
    subscribed while at least one local subscriber wants it.
    """

    PREFIX = "concierge:"

    def __init__(self, url: str, replay_size: int = 100) -> None:
        import redis

        self._redis = redis.Redis.from_url(url, socket_timeout=10, health_check_interval=30)
        self._redis.ping()
        self._script = self._redis.register_script(_PUBLISH_LUA)
        self._replay_size = replay_size
        self._fanout = _Fanout()
        self._pubsub = self._redis.pubsub()
        self._pubsub.subscribe(self.PREFIX + "__control__")  # keeps the listener's connection subscribed
        self._command_lock = threading.Lock()  # one writer at a time on the subscription connection
        self._confirmed: dict[str, threading.Event] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._listen, name="redis-pubsub", daemon=True)
        self._thread.start()

    def publish(self, channel: str, payload: Any) -> int:
        data = json.dumps(payload, separators=(",", ":"))
        keys = [f"{self.PREFIX}seq:{channel}", f"{self.PREFIX}recent:{channel}"]
        return int(self._script(keys=keys, args=[data, self._replay_size, self.PREFIX + "ch:" + channel]))

    def subscribe(self, channel: str) -> Subscription:
        sub = Subscription(channel, self._unsubscribe)
        if self._fanout.add(sub):
            name = self.PREFIX + "ch:" + channel
            confirmed = self._confirmed.setdefault(name, threading.Event())
            with self._command_lock:
                self._pubsub.subscribe(name)
            # Return once Redis has acknowledged, so that a publish right after arrives live. A late
            # acknowledgement loses nothing: streams catch up from `recent` by event id (StreamHub).
            if not confirmed.wait(5):
                log.warning("redis subscribe not acknowledged channel=%s", channel)
        else:
            pending = self._confirmed.get(self.PREFIX + "ch:" + channel)
            if pending is not None:
                pending.wait(5)
        return sub

    def _unsubscribe(self, sub: Subscription) -> None:
        if self._fanout.remove(sub):
            name = self.PREFIX + "ch:" + sub.channel
            self._confirmed.pop(name, None)
            try:
                with self._command_lock:
                    self._pubsub.unsubscribe(name)
            except Exception:  # the listener reconnects and resubscribes what is still wanted
                log.warning("redis unsubscribe failed channel=%s", sub.channel, exc_info=True)

    def latest(self, channel: str) -> int:
        """The id of the channel's newest event (0: none yet), from the counter every publish increments."""
        raw = self._redis.get(f"{self.PREFIX}seq:{channel}")
        return int(raw) if raw is not None else 0

    def recent(self, channel: str, after: int) -> list[Event]:
        raw = self._redis.lrange(f"{self.PREFIX}recent:{channel}", 0, -1)
        events = [self._event(channel, item) for item in raw]
        return sorted((e for e in events if e.id > after), key=lambda e: e.id)

    @staticmethod
    def _event(channel: str, envelope: bytes | str) -> Event:
        obj = json.loads(envelope)
        return Event(int(obj["id"]), channel, obj["data"])

    def _listen(self) -> None:
        prefix = self.PREFIX + "ch:"
        while not self._stop.is_set():
            try:
                message = self._pubsub.get_message(timeout=0.5)
            except Exception:
                if self._stop.is_set():
                    return
                log.warning("redis listener error; retrying", exc_info=True)
                self._stop.wait(0.5)
                continue
            if not message:
                continue
            name = message["channel"].decode() if isinstance(message["channel"], bytes) else message["channel"]
            if message.get("type") == "subscribe":
                confirmed = self._confirmed.get(name)
                if confirmed is not None:
                    confirmed.set()
                continue
            if message.get("type") != "message":
                continue
            if name.startswith(prefix):
                self._fanout.deliver(self._event(name[len(prefix):], message["data"]))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=3)
        try:
            self._pubsub.close()
        finally:
            self._redis.close()


def open_pubsub(url: str, replay_size: int) -> PubSub:
    """The configured back end: Redis when PUBSUB_URL is set, in-process otherwise."""
    return RedisPubSub(url, replay_size) if url else InProcessPubSub(replay_size)
