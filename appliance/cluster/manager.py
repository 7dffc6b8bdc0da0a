"""ManagerSink: the manager node's side of the cluster; alert events from Redis into the alert store.

The manager runs REST (and the console beside it) on the alert store, as a standalone appliance
does, but ingests nothing: its "analysis" is a consumer of the partitions' alert streams
(`alerts:{p}`, consumer group `manager`). Each event is an upsert by alert id (an alert the store
does not know is inserted, a known one updated without touching its triage status), acknowledged
after it is saved: a manager that restarts reads its pending events again, harmlessly.

Events are parsed at this edge: anything that is not an alert event of the documented shape is
counted in `alerts_refused` and acknowledged (it would never parse better).
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from appliance.cluster import bus
from appliance.config import Settings
from appliance.detection.alert import MAX_DETECTIONS_KEPT, Alert
from appliance.detection.alert_store import AlertStore
from appliance.model import DnsMessage, FlowRecord

log = logging.getLogger(__name__)

READ_COUNT = 100
BLOCK_MS = 500
MAX_EVENT_BYTES = 1 << 20
_FIELDS = {f: t for f, t in (("id", str), ("agent_id", str), ("indicator", str), ("category", str), ("severity", int),
                               ("confidence", float), ("summary", str), ("first_ns", int), ("last_ns", int),
                               ("detection_count", int), ("created_at", float), ("updated_at", float))}


def parse_event(raw: bytes) -> tuple[str, Alert]:
    """(event, alert) from an alert stream entry; ValueError when it is not one."""
    if len(raw) > MAX_EVENT_BYTES:
        raise ValueError(f"alert event of {len(raw)} bytes")
    body = json.loads(raw)
    if not isinstance(body, dict) or body.get("event") not in ("opened", "updated") or not isinstance(body.get("alert"), dict):
        raise ValueError("not an alert event")
    data = body["alert"]
    values: dict[str, Any] = {}
    for name, kind in _FIELDS.items():
        value = data.get(name)
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ValueError(f"alert field {name} is not a {kind.__name__}")
        values[name] = value
    detections = data.get("detections")
    if not isinstance(detections, list) or not all(isinstance(d, dict) for d in detections):
        raise ValueError("alert detections are not a list of objects")
    if not values["id"] or len(values["id"]) > 64:
        raise ValueError("alert id missing or too long")
    return body["event"], Alert(**values, detections=detections[-MAX_DETECTIONS_KEPT:])


class ManagerSink:
    """No flows here (no gRPC ingestion); a thread consuming the alert streams into the store."""

    mode = "manager"
    queue_depth = 0
    flows_dropped = 0
    dropped_by_agent: dict[str, int] = {}

    def __init__(self, settings: Settings, store: AlertStore) -> None:
        self._cluster = settings.cluster
        self._store = store
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._client: Any = None
        self.alerts_consumed = 0
        self.alerts_refused = 0
        self.redis_errors = 0

    # -- the sink face (nothing arrives: the manager has no gRPC ingestion) -------------------
    def submit_many(self, flows: list[FlowRecord]) -> None:
        pass

    def observe_answer(self, agent_id: str, message: DnsMessage) -> None:
        pass

    def observe_dns(self, agent_id: str, message: DnsMessage) -> None:
        pass

    def reload(self) -> None:
        pass

    def counter(self, name: str) -> int:
        return 0

    def export_stats(self) -> dict[str, Any]:
        return {}

    def status(self) -> dict[str, Any]:
        return {"mode": self.mode, "running": self._client is not None, "pid": 0, "restarts": 0, "flows_lost": 0,
                "dns_dropped": 0, "flows_not_analysed": 0,
                "cluster": {"alerts_consumed": self.alerts_consumed, "alerts_refused": self.alerts_refused,
                            "redis_errors": self.redis_errors}}

    def spawn(self) -> None:
        pass

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="cluster-alerts", daemon=True)
        self._thread.start()

    def drain(self, timeout: float = 30.0) -> bool:
        return True

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        if self._client is not None:
            self._client.close()
            self._client = None

    # -- the consumer -----------------------------------------------------------------------------
    def _connect(self) -> Any:
        import redis

        if self._client is None:
            client = bus.connect(self._cluster.redis_url)
            for p in range(self._cluster.partitions):
                try:
                    client.xgroup_create(bus.alerts_key(p), bus.MANAGER_GROUP, id="0", mkstream=True)
                except redis.ResponseError as err:
                    if "BUSYGROUP" not in str(err):
                        raise
            self._client = client
            self._pending = True  # events read before a restart and never acknowledged come first
        return self._client

    def _run(self) -> None:
        import redis

        backoff = 0.5
        while not self._stop.is_set():
            try:
                client = self._connect()
                cursor = "0" if self._pending else ">"
                streams = {bus.alerts_key(p): cursor for p in range(self._cluster.partitions)}
                reply = client.xreadgroup(bus.MANAGER_GROUP, "manager", streams, count=READ_COUNT,
                                          block=None if self._pending else BLOCK_MS)
                got = 0
                for name, entries in reply or []:
                    got += len(entries)
                    self._consume(client, name, entries)
                if self._pending and not got:
                    self._pending = False
                backoff = 0.5
            except redis.RedisError as err:
                self.redis_errors += 1
                log.error("cluster: alert streams unreachable (%s): trying again in %.1f s", err, backoff)
                self._client = None
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
            except Exception:
                log.exception("cluster: alert consumer failed; going on")
                self._stop.wait(0.5)

    def _consume(self, client: Any, stream: Any, entries: list[Any]) -> None:
        ids = []
        for entry_id, fields in entries:
            ids.append(entry_id)
            if not fields:
                continue
            try:
                event, alert = parse_event(fields.get(b"a", b""))
            except ValueError as err:
                self.alerts_refused += 1
                log.warning("cluster: alert event %r refused: %s", entry_id, err)
                continue
            known = self._store.get(alert.id)
            if known is not None:
                alert.status = known.status  # triage belongs to the manager
            self._store.save("updated" if known is not None else "opened", alert)
            self.alerts_consumed += 1
        if ids:
            client.xack(stream, bus.MANAGER_GROUP, *ids)
