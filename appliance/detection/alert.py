"""An alert: what correlation raises about one agent and one indicator, and what it may keep."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

# Detections an alert keeps (the newest); its detection_count still counts every one.
MAX_DETECTIONS_KEPT = 100


@dataclass(slots=True)
class Alert:
    """A correlated alert about one agent and one indicator."""

    id: str
    agent_id: str
    indicator: str
    category: str
    severity: int  # Severity value
    confidence: float
    summary: str
    first_ns: int
    last_ns: int
    status: str = "New"
    detections: list[dict[str, Any]] = field(default_factory=list)
    detection_count: int = 0
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)

    @staticmethod
    def new_id() -> str:
        return str(uuid.uuid4())
