"""FinishedFlows: a bounded ring of recently finished flows for the REST API."""

from __future__ import annotations

import threading
from collections import deque

from appliance.flows.record_codec import EndedFlow, record_of
from appliance.model import FlowRecord


class FinishedFlows:
    """Keeps the last `size` finished flows in memory (flows are never persisted).

    Flows are kept as the table handed them over (a WireFlow stays encoded) and decoded when asked for:
    the ring takes every ended flow, the API reads a few.
    """

    def __init__(self, size: int) -> None:
        self._ring: deque[EndedFlow] = deque(maxlen=size)
        self._lock = threading.Lock()

    def extend(self, flows: list[EndedFlow]) -> None:
        with self._lock:  # retention rebuilds the ring under the lock
            self._ring.extend(flows)

    def newest(self, agent_id: str | None, limit: int) -> list[FlowRecord]:
        with self._lock:
            items = list(self._ring)
        out = []
        for flow in reversed(items):
            if agent_id is None or flow.agent_id == agent_id:
                out.append(record_of(flow))
                if len(out) >= limit:
                    break
        return out

    def find(self, flow_id: str) -> FlowRecord | None:
        with self._lock:
            items = list(self._ring)
        for flow in reversed(items):
            if flow.flow_id == flow_id:
                return record_of(flow)
        return None

    def drop_older_than(self, cutoff_ns: int) -> int:
        """Forget finished flows last seen before `cutoff_ns` (retention); returns how many."""
        with self._lock:
            kept = [f for f in self._ring if f.last_ns >= cutoff_ns]
            dropped = len(self._ring) - len(kept)
            if dropped:
                self._ring.clear()
                self._ring.extend(kept)
        return dropped
