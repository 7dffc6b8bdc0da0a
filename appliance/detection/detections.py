"""Building detections, and the re-report throttle that windowed detectors share."""

from __future__ import annotations

import itertools
import os
import uuid
from typing import Any

from appliance.model import Category, Detection, FlowRecord, Severity, Transport

_TRANSPORT_NAMES = {Transport.TCP: "tcp", Transport.UDP: "udp", Transport.ICMP: "icmp", Transport.OTHER: "other"}
_COUNTER_LIMIT = 1 << 48  # the last group of a UUID's text: 12 hex digits


class DetectionIds:
    """Detection ids without a system call each: a random prefix drawn once per process and a counter, in the
    text shape of a version-4 UUID (the first four groups from the prefix, the last group the counter).

    str(uuid.uuid4()) asked the kernel for 16 random bytes per detection (1.3% of the analysis process's
    time). What an id must be: unique among every detection any process or restart of the appliance makes
    (alerts keep detections by id, the alert store remembers their JSON by id). 74 random bits per process
    (uuid4's version and variant bits fixed) make two processes' prefixes collide with probability about
    n**2 / 2**75 for n processes ever started; each prefix serves 2**48 detections, then a new one is drawn,
    and a forked child draws its own. An id grants nothing (it names a detection inside an alert the reader
    already sees), so that the ids of one process count up is no disclosure.
    """

    def __init__(self) -> None:
        self._prefix = ""
        self._counter: itertools.count[int] = itertools.count()
        self._draw()
        os.register_at_fork(after_in_child=self._draw)

    def _draw(self) -> None:
        self._prefix = str(uuid.uuid4())[:24]  # "xxxxxxxx-xxxx-4xxx-yxxx-": 80 bits, 74 of them random
        self._counter = itertools.count()

    def next(self) -> str:
        n = next(self._counter)
        if n >= _COUNTER_LIMIT:
            self._draw()
            n = next(self._counter)
        return f"{self._prefix}{n:012x}"


# One per process: every detector draws from it (ids must not repeat within the process, whoever makes them).
_detection_ids = DetectionIds()
new_detection_id = _detection_ids.next


def transport_name(flow: FlowRecord) -> str:
    return _TRANSPORT_NAMES.get(flow.transport, "other")


def make_detection(
    detector: str, category: Category, confidence: float, severity: Severity, *, agent_id: str, indicator: str,
    protocol: str, transport: str, evidence: dict[str, Any], flow_ids: list[str], first_ns: int, last_ns: int,
    remote_ip: str = "", domain: str = "",
) -> Detection:
    """A detection whose evidence always carries protocol, transport, remote_ip and domain (for exclusions)."""
    evidence = {"protocol": protocol, "transport": transport, "remote_ip": remote_ip, "domain": domain, **evidence}
    return Detection(detector, category, round(max(0.0, min(confidence, 1.0)), 3), severity, agent_id, indicator,
                     evidence, flow_ids, first_ns, last_ns, new_detection_id())


class Throttle:
    """Lets one key report at most once per interval of event time (windowed detectors re-report)."""

    def __init__(self, max_keys: int = 100_000) -> None:
        self._last: dict[tuple[str, ...], int] = {}
        self._max_keys = max_keys

    def allow(self, key: tuple[str, ...], now_ns: int, interval_s: float) -> bool:
        last = self._last.get(key)
        if last is not None and now_ns - last < interval_s * 1e9 and now_ns >= last:
            return False
        if len(self._last) >= self._max_keys:
            self._last.clear()
        self._last[key] = now_ns
        return True

    def would_allow(self, key: tuple[str, ...], now_ns: int, interval_s: float) -> bool:
        """What `allow` would answer now, recording nothing (a refusal records nothing either)."""
        last = self._last.get(key)
        return not (last is not None and now_ns - last < interval_s * 1e9 and now_ns >= last)
