"""The cluster: ingest, analyzer and manager roles on Redis Streams (README, "Cluster").

`bus` holds the Redis layout (keys with one hash tag per partition, the Lua scripts that append and
commit atomically, the keyed partition hash); `ingest` is the ingest node's analysis sink (flow
record batches to the partition streams); `analyzer` leases partitions and analyses them; `manager`
consumes the alert streams into the alert store. `sink_for` is what the composition root calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from appliance.app import DetectionStores
    from appliance.config import Settings


def sink_for(settings: Settings, stores: DetectionStores, on_drop: Callable[[str, int], None] | None = None) -> Any:
    """The analysis sink of an ingest or manager node (same face as AnalysisProcess)."""
    role = settings.cluster.role
    if role == "ingest":
        from appliance.cluster.ingest import RedisSink

        return RedisSink(settings, settings.limits.analysis_queue, on_drop=on_drop)
    if role == "manager":
        from appliance.cluster.manager import ManagerSink

        return ManagerSink(settings, stores)
    raise ValueError(f"cluster.role {role!r} has no analysis sink")
