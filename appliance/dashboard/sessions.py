"""Server-side sessions: an opaque random id in the cookie, everything else here, idle and absolute expiry."""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from dataclasses import dataclass, field

MAX_SESSIONS = 10_000


@dataclass
class Session:
    username: str
    role: str
    csrf: str
    created: float
    last_seen: float = field(default=0.0)


class SessionStore:
    """Sessions in memory, keyed by the SHA-256 of their id (a dump of the table yields no usable cookie).

    A restart of the dashboard signs everyone out; that is the price of keeping nothing on disk.
    """

    def __init__(self, idle_s: float, max_age_s: float, clock: object = time.monotonic) -> None:
        self._idle = idle_s
        self._max_age = max_age_s
        self._clock = clock
        self._sessions: dict[bytes, Session] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _key(session_id: str) -> bytes:
        return hashlib.sha256(session_id.encode("utf-8", "surrogateescape")).digest()

    def _now(self) -> float:
        return self._clock()  # type: ignore[operator, no-any-return]

    def create(self, username: str, role: str) -> tuple[str, Session]:
        """A fresh id (never one the client chose: no fixation)."""
        now = self._now()
        session_id = secrets.token_urlsafe(32)
        session = Session(username, role, secrets.token_urlsafe(32), now, now)
        with self._lock:
            if len(self._sessions) >= MAX_SESSIONS:
                self._expire(now)
                if len(self._sessions) >= MAX_SESSIONS:  # evict the least recently used
                    oldest = min(self._sessions, key=lambda k: self._sessions[k].last_seen)
                    del self._sessions[oldest]
            self._sessions[self._key(session_id)] = session
        return session_id, session

    def get(self, session_id: str) -> Session | None:
        """The live session for an id (touching it), or None when unknown or expired."""
        if not session_id or len(session_id) > 128:
            return None
        now = self._now()
        key = self._key(session_id)
        with self._lock:
            session = self._sessions.get(key)
            if session is None:
                return None
            if now - session.last_seen > self._idle or now - session.created > self._max_age:
                del self._sessions[key]
                return None
            session.last_seen = now
            return session

    def end(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(self._key(session_id), None)

    def end_user(self, username: str, keep: str | None = None) -> int:
        """End every session of `username` except `keep` (the id of the one asking)."""
        keep_key = self._key(keep) if keep else None
        with self._lock:
            doomed = [k for k, s in self._sessions.items() if s.username == username and k != keep_key]
            for key in doomed:
                del self._sessions[key]
        return len(doomed)

    def _expire(self, now: float) -> None:
        for key in [k for k, s in self._sessions.items()
                    if now - s.last_seen > self._idle or now - s.created > self._max_age]:
            del self._sessions[key]

    def __len__(self) -> int:
        return len(self._sessions)
