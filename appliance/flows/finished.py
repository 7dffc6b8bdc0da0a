"""FinishedFlows: a bounded ring of recently finished flows for the REST API."""

from __future__ import annotations

import threading
from collections import deque

from appliance.model import FlowRecord


class FinishedFlows:
    """Keeps the last `size` finished flows in memory (flows are never persisted)."""

    def __init__(self, size: int) -> None:
        self._ring: deque[FlowRecord] = deque(maxlen=size)
        self._lock = threading.Lock()

    def extend(self, flows: list[FlowRecord]) -> None:
        self._ring.extend(flows)

    def newest(self, agent_id: str | None, limit: int) -> list[FlowRecord]:
        with self._lock:
            items = list(self._ring)
        out = []
        for flow in reversed(items):
            if agent_id is None or flow.agent_id == agent_id:
                out.append(flow)
                if len(out) >= limit:
                    break
        return out

    def find(self, flow_id: str) -> FlowRecord | None:
        with self._lock:
            items = list(self._ring)
        for flow in reversed(items):
            if flow.flow_id == flow_id:
                return flow
        return None
