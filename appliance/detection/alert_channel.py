"""The channel that delivers every opened or updated alert to its subscribers."""

from __future__ import annotations

import logging
from collections.abc import Callable

from appliance.detection.alert import Alert

log = logging.getLogger(__name__)


class AlertChannel:
    """Delivers every opened or updated alert to its subscribers (the store first, exporters later)."""

    def __init__(self) -> None:
        self._subscribers: list[Callable[[str, Alert], None]] = []
        self.delivery_errors = 0

    def subscribe(self, subscriber: Callable[[str, Alert], None]) -> None:
        self._subscribers.append(subscriber)

    def publish(self, event: str, alert: Alert) -> None:
        """`event` is "opened" or "updated"; a failing subscriber is counted and logged, the others still run."""
        for subscriber in self._subscribers:
            try:
                subscriber(event, alert)
            except Exception:
                self.delivery_errors += 1
                log.exception("alert subscriber failed event=%s alert=%s", event, alert.id)
