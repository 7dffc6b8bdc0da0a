"""Correlation: detections grouped per (agent, indicator) become few, trustworthy alerts.

Within `window_s` of event time each detection contributes its confidence decayed with a
`half_life_s` half-life; the group's probability is P = 1 - prod(1 - P_i), raised by
`diversity_bonus` (relative, +10% of P) per distinct detector beyond the first, capped at
`diversity_cap`, and clamped to 0.99. A group opens an alert only with at least `min_detections`
detections and P >= `min_confidence`; a group whose (agent, indicator) already has an open alert
updates that alert instead. P above `escalate_above` raises the severity one level.
"""

from __future__ import annotations

import logging
import operator
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

from appliance.detection.alert import Alert, MAX_DETECTIONS_KEPT
from appliance.detection.alert_channel import AlertChannel
from appliance.detection.alert_store import AlertStore
from appliance.detection.analysis_config import CorrelationConfig
from appliance.detection.analysis_config_holder import AnalysisConfigHolder
from appliance.model import Category, Detection, Severity
from appliance.native.dpi import correlation_sums

log = logging.getLogger(__name__)

_NS = 1_000_000_000
_MAX_GROUPS = 100_000
# Behavioural categories say how traffic behaves; a protocol finding in the same group says what it is.
_GENERIC = frozenset({Category.BEACONING, Category.VOLUME_ANOMALY})


def combine(contributions: list[tuple[Detection, float]], config: CorrelationConfig) -> float:
    """Combined probability of decayed contributions (detection, decayed confidence)."""
    remaining = 1.0
    for _, p in contributions:
        remaining *= 1.0 - min(max(p, 0.0), 1.0)
    return _combined(remaining, len({d.detector for d, _ in contributions}), config)


def _combined(remaining: float, detectors: int, config: CorrelationConfig) -> float:
    """`combine` from the product of (1 - P_i) and the number of distinct detectors."""
    probability = 1.0 - remaining
    bonus = min(config.diversity_bonus * (detectors - 1), config.diversity_cap)
    return min(probability * (1.0 + bonus), 0.99)


_last_ns = operator.attrgetter("last_ns")
Sums = tuple[float, set[str], dict[Category, float], dict[Category, tuple[Detection, float]], Severity | None]


def group_sums(group: Iterable[Detection], now_ns: int, half_life_ns: float) -> Sums:
    """What the judgement needs from a group, in one pass in the group's order (the same float operations in the
    same order as combine): the product of (1 - P_i), the detectors, each category's summed contributions and its
    first strongest one, the highest severity. The Python twin of native dpi.correlation_sums, which _judge calls
    (this loop takes what that declines)."""
    remaining = 1.0
    detectors: set[str] = set()
    weights: dict[Category, float] = {}
    leads: dict[Category, tuple[Detection, float]] = {}
    severity: Severity | None = None
    for d in group:
        p = d.confidence * 0.5 ** (max(now_ns - d.last_ns, 0) / half_life_ns)
        remaining *= 1.0 - min(max(p, 0.0), 1.0)
        detectors.add(d.detector)
        category = d.category
        weights[category] = weights.get(category, 0.0) + p
        best = leads.get(category)
        if best is None or p > best[1]:
            leads[category] = (d, p)
        if severity is None or d.severity > severity:
            severity = d.severity
    return remaining, detectors, weights, leads, severity


def detection_view(d: Detection) -> dict[str, Any]:
    return {"id": d.id, "detector": d.detector, "category": d.category.value, "confidence": d.confidence,
            "severity": d.severity.label, "evidence": d.evidence, "flow_ids": d.flow_ids[:20],
            "first_ns": d.first_ns, "last_ns": d.last_ns}


class Correlator:
    """Keeps the open groups in memory; alerts go out through the channel (the store persists them)."""

    def __init__(self, config: AnalysisConfigHolder, store: AlertStore, channel: AlertChannel) -> None:
        self._config = config
        self._store = store
        self._channel = channel
        self._groups: dict[tuple[str, str], deque[Detection]] = {}
        self.alerts_updated = 0

    def correlate(self, detections: list[Detection]) -> int:
        config = self._config.current.correlation
        touched: dict[tuple[str, str], list[Detection]] = {}
        for d in detections:
            key = (d.agent_id, d.indicator)
            group = self._groups.get(key)
            if group is None:
                if len(self._groups) >= _MAX_GROUPS:
                    self._prune(d.last_ns, config)
                group = self._groups[key] = deque(maxlen=1000)
            group.append(d)
            touched.setdefault(key, []).append(d)
        opened = 0
        for key, new in touched.items():
            opened += self._judge(key, new, config)
        return opened

    def _prune(self, now_ns: int, config: CorrelationConfig) -> None:
        horizon = now_ns - int(config.window_s * _NS)
        for key in [k for k, g in self._groups.items() if not g or g[-1].last_ns < horizon]:
            del self._groups[key]
        if len(self._groups) >= _MAX_GROUPS:
            self._groups.clear()

    def _judge(self, key: tuple[str, str], new: list[Detection], config: CorrelationConfig) -> int:
        group = self._groups[key]
        now_ns = max(map(_last_ns, group))
        window_ns = int(config.window_s * _NS)
        while group and group[0].last_ns < now_ns - window_ns:
            group.popleft()
        half_life_ns = config.half_life_s * _NS
        try:  # one pass over the group in C (a beacon's group is judged again at each of its flows)
            remaining, detectors, weights, leads, severity = correlation_sums(group, now_ns, half_life_ns)
        except (TypeError, ValueError):  # a value past what C holds exactly: the same loop in Python
            remaining, detectors, weights, leads, severity = group_sums(group, now_ns, half_life_ns)
        probability = _combined(remaining, len(detectors), config)
        existing = self._store.find_open(*key)
        if existing is None and (len(group) < config.min_detections or probability < config.min_confidence):
            return 0
        category = self._category_of(weights)
        assert severity is not None  # the group holds at least the new detections
        if probability > config.escalate_above and severity < Severity.CRITICAL:
            severity = Severity(severity + 1)
        lead = leads[category][0]
        if existing is None:
            alert = Alert(
                id=Alert.new_id(), agent_id=key[0], indicator=key[1], category=category.value, severity=int(severity),
                confidence=round(probability, 3), summary="", first_ns=min(d.first_ns for d in group),
                last_ns=now_ns, detections=[detection_view(d) for d in group], detection_count=len(group))
            event = "opened"
        else:
            alert = existing
            seen = {d["id"] for d in alert.detections}
            alert.detections.extend(detection_view(d) for d in new if d.id not in seen)
            alert.detections = alert.detections[-MAX_DETECTIONS_KEPT:]
            alert.detection_count += len(new)
            alert.confidence = round(max(alert.confidence, probability), 3)
            if probability >= alert.confidence or category.value == alert.category:
                alert.category = category.value
            alert.severity = max(alert.severity, int(severity))
            alert.last_ns = max(alert.last_ns, now_ns)
            alert.first_ns = min(alert.first_ns, min(d.first_ns for d in new))
            alert.updated_at = time.time()
            event = "updated"
            self.alerts_updated += 1
        reason = lead.evidence.get("reason", lead.detector)
        alert.summary = (f"{alert.category} on agent {key[0]} toward {key[1]}: {reason} "
                         f"({alert.detection_count} detections from {', '.join(sorted(detectors))})")
        self._channel.publish(event, alert)
        if event == "opened":
            log.info("alert opened id=%s agent=%s indicator=%s category=%s confidence=%.2f",
                     alert.id, key[0], key[1], alert.category, alert.confidence)
        return 1 if event == "opened" else 0

    @staticmethod
    def _category_of(weights: dict[Category, float]) -> Category:
        """The heaviest specific category, else the heaviest generic one (weights: summed contributions)."""
        specific = {c: w for c, w in weights.items() if c not in _GENERIC}
        pool = specific or weights
        return max(pool, key=pool.__getitem__)
