"""Failed sign-ins counted per account and per address over a sliding window."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque

MAX_KEYS = 20_000  # bounded memory whatever names and addresses an attacker sprays


class SignInLimiter:
    """`retry_after(account, address)` > 0 while either has too many recent failures."""

    def __init__(self, per_account: int = 5, per_address: int = 20, window_s: float = 900.0,
                 clock: object = time.monotonic) -> None:
        self.per_account = per_account
        self.per_address = per_address
        self.window_s = window_s
        self._clock = clock
        self._failures: OrderedDict[tuple[str, str], deque[float]] = OrderedDict()
        self._lock = threading.Lock()
        self.refused = 0

    def _now(self) -> float:
        return self._clock()  # type: ignore[operator, no-any-return]

    def _recent(self, key: tuple[str, str], now: float) -> deque[float]:
        times = self._failures.get(key)
        if times is None:
            return deque()
        while times and times[0] <= now - self.window_s:
            times.popleft()
        return times

    def retry_after(self, account: str, address: str) -> int:
        now = self._now()
        with self._lock:
            waits = []
            for key, limit in ((("account", account.lower()), self.per_account), (("address", address), self.per_address)):
                times = self._recent(key, now)
                if len(times) >= limit:
                    waits.append(times[len(times) - limit] + self.window_s - now)
            if waits:
                self.refused += 1
                return max(1, int(max(waits)) + 1)
            return 0

    def failed(self, account: str, address: str) -> None:
        now = self._now()
        with self._lock:
            for key in (("account", account.lower()), ("address", address)):
                times = self._recent(key, now)
                times.append(now)
                self._failures[key] = times
                self._failures.move_to_end(key)
            while len(self._failures) > MAX_KEYS:
                self._failures.popitem(last=False)

    def succeeded(self, account: str) -> None:
        with self._lock:
            self._failures.pop(("account", account.lower()), None)
