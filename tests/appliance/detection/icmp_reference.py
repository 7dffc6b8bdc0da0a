"""dpi/icmp.is_ping_pattern as it was, one byte at a time: the reference tests/appliance/detection/test_units.py
holds the bytes-comparing form to."""

from __future__ import annotations

_WINDOWS = b"abcdefghijklmnopqrstuvw"


def is_ping_pattern_reference(data: bytes) -> bool:
    if len(data) <= 16:
        return True
    if data.startswith(_WINDOWS[: min(len(data), len(_WINDOWS))]):
        return all(b == _WINDOWS[i % len(_WINDOWS)] for i, b in enumerate(data))
    for skip in (8, 16, 0):
        tail = data[skip:]
        if len(tail) >= 8 and all(tail[i + 1] == (tail[i] + 1) & 0xFF for i in range(len(tail) - 1)):
            return True
        for period in (1, 2, 4, 8, 16):
            if len(tail) >= 2 * period and tail == (tail[:period] * (len(tail) // period + 1))[: len(tail)]:
                return True
    return False
