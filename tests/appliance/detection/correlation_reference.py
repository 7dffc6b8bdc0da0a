"""Correlator._judge as it was before its passes over the group were fused into one: the reference
tests/appliance/detection/test_correlation.py holds the correlator's published alerts equal to."""

from __future__ import annotations

import time

from appliance.detection.alert import MAX_DETECTIONS_KEPT, Alert
from appliance.detection.analysis_config import CorrelationConfig
from appliance.detection.correlation import _GENERIC, _NS, Correlator, combine, detection_view, log
from appliance.model import Category, Detection, Severity


class CorrelatorReference(Correlator):
    def _judge(self, key: tuple[str, str], new: list[Detection], config: CorrelationConfig) -> int:
        group = self._groups[key]
        now_ns = max(d.last_ns for d in group)
        window_ns = int(config.window_s * _NS)
        while group and group[0].last_ns < now_ns - window_ns:
            group.popleft()
        contributions = [(d, d.confidence * 0.5 ** (max(now_ns - d.last_ns, 0) / (config.half_life_s * _NS))) for d in group]
        probability = combine(contributions, config)
        existing = self._store.find_open(*key)
        if existing is None and (len(contributions) < config.min_detections or probability < config.min_confidence):
            return 0
        category = self._category(contributions)
        severity = max(d.severity for d, _ in contributions)
        if probability > config.escalate_above and severity < Severity.CRITICAL:
            severity = Severity(severity + 1)
        lead = max((c for c in contributions if c[0].category is category), key=lambda c: c[1])[0]
        detectors = sorted({d.detector for d, _ in contributions})
        if existing is None:
            alert = Alert(
                id=Alert.new_id(), agent_id=key[0], indicator=key[1], category=category.value, severity=int(severity),
                confidence=round(probability, 3), summary="", first_ns=min(d.first_ns for d, _ in contributions),
                last_ns=now_ns, detections=[detection_view(d) for d, _ in contributions],
                detection_count=len(contributions))
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
                         f"({alert.detection_count} detections from {', '.join(detectors)})")
        self._channel.publish(event, alert)
        if event == "opened":
            log.info("alert opened id=%s agent=%s indicator=%s category=%s confidence=%.2f",
                     alert.id, key[0], key[1], alert.category, alert.confidence)
        return 1 if event == "opened" else 0

    @staticmethod
    def _category(contributions: list[tuple[Detection, float]]) -> Category:
        weights: dict[Category, float] = {}
        for d, p in contributions:
            weights[d.category] = weights.get(d.category, 0.0) + p
        specific = {c: w for c, w in weights.items() if c not in _GENERIC}
        pool = specific or weights
        return max(pool, key=pool.__getitem__)
