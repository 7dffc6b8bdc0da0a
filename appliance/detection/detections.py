"""Building detections, and the re-report throttle that windowed detectors share."""

from __future__ import annotations

from typing import Any

from appliance.model import Category, Detection, FlowRecord, Severity, Transport

_TRANSPORT_NAMES = {Transport.TCP: "tcp", Transport.UDP: "udp", Transport.ICMP: "icmp", Transport.OTHER: "other"}


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
                     evidence, flow_ids, first_ns, last_ns)


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
