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

import logging
import threading
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from appliance.cluster import bus, shared_config
from appliance.config import Settings
from appliance.detection.alert import MAX_DETECTIONS_KEPT, Alert
from appliance.flows.record_codec import AnyDns
from appliance.model import Category, DnsMessage, FlowRecord, Severity

if TYPE_CHECKING:
    from appliance.app import DetectionStores

log = logging.getLogger(__name__)

READ_COUNT = 100
BLOCK_MS = 500
MAX_EVENT_BYTES = 1 << 20
_NS_MAX = 253_402_300_799 * 10**9  # the end of year 9999: what the REST views can render as a date

EventTime = Annotated[int, Field(ge=0, le=_NS_MAX)]
Text = Annotated[str, Field(max_length=4096)]


class _DetectionEvent(BaseModel):
    """A detection as the correlator writes it into an alert (correlation.detection_view)."""

    model_config = ConfigDict(strict=True, extra="forbid")
    id: Text = ""
    detector: Text
    category: Category
    confidence: Annotated[float, Field(ge=0, le=1)]
    severity: Text
    evidence: dict[str, Any]
    flow_ids: Annotated[list[Text], Field(max_length=100)] = []
    first_ns: EventTime
    last_ns: EventTime

    @field_validator("category", mode="before")
    @classmethod
    def _category(cls, value: Any) -> Any:
        return Category(value) if isinstance(value, str) else value


class _AlertFields(BaseModel):
    """An alert as an analyzer publishes it (dataclasses.asdict of detection.alert.Alert)."""

    model_config = ConfigDict(strict=True, extra="forbid")
    id: Annotated[str, Field(min_length=1, max_length=64)]
    agent_id: Text
    indicator: Text
    category: Text
    severity: Annotated[int, Field(ge=min(Severity), le=max(Severity))]
    confidence: Annotated[float, Field(ge=0, le=1)]
    summary: Annotated[str, Field(max_length=65536)]
    first_ns: EventTime
    last_ns: EventTime
    status: Text = "New"
    detections: Annotated[list[_DetectionEvent], Field(max_length=MAX_DETECTIONS_KEPT)]
    detection_count: Annotated[int, Field(ge=0)]
    created_at: float
    updated_at: float

    @field_validator("created_at", "updated_at", "confidence", mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


class _AlertEvent(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    event: Literal["opened", "updated"]
    alert: _AlertFields


def parse_event(raw: bytes) -> tuple[str, Alert]:
    """(event, alert) from an alert stream entry; ValueError when it is not one."""
    if len(raw) > MAX_EVENT_BYTES:
        raise ValueError(f"alert event of {len(raw)} bytes")
    try:
        body = _AlertEvent.model_validate_json(raw)
    except ValidationError as err:
        first = err.errors()[0]
        raise ValueError(f"{'.'.join(str(p) for p in first['loc']) or 'event'}: {first['msg']}") from None
    fields = body.alert.model_dump(exclude={"detections", "status"})
    detections = [d.model_dump(mode="json") for d in body.alert.detections]
    return body.event, Alert(**fields, detections=detections)


class ManagerSink:
    """No flows here (no gRPC ingestion); a thread consuming the alert streams into the store."""

    mode = "manager"
    queue_depth = 0
    oldest_wait_s = 0.0
    flows_dropped = 0
    dropped_by_agent: dict[str, int] = {}

    def __init__(self, settings: Settings, stores: DetectionStores) -> None:
        self._cluster = settings.cluster
        self._stores = stores
        self._store = stores.alerts
        # The analysis config, exclusions and console settings go to the analyzers (shared_config) when the
        # manager connects and after every REST change of them (reload(), from the server's listeners).
        self._publish = threading.Event()
        self.config_version = 0
        self.config_publish_errors = 0
        self.triage_published = 0  # triage changes sent to the analyzers (cluster:triage)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._client: Any = None
        self.alerts_consumed = 0
        self.alerts_refused = 0
        self.redis_errors = 0

    # -- the sink face (nothing arrives: the manager has no gRPC ingestion) -------------------
    def submit_many(self, flows: list[FlowRecord]) -> None:
        pass

    def observe_answers(self, answers: list[tuple[str, AnyDns]]) -> None:
        pass

    def observe_dns(self, agent_id: str, message: DnsMessage) -> None:
        pass

    def reload(self) -> None:
        """A REST change of what steers analysis: published to the analyzers by the consumer thread, within
        one read of the alert streams (BLOCK_MS), so that a REST request never waits on Redis."""
        self._publish.set()

    def counter(self, name: str) -> int:
        return 0

    def export_stats(self) -> dict[str, Any]:
        return {}

    def status(self) -> dict[str, Any]:
        return {"mode": self.mode, "running": self._client is not None, "pid": 0, "restarts": 0, "flows_lost": 0,
                "dns_dropped": 0, "flows_not_analysed": 0,
                "cluster": {"alerts_consumed": self.alerts_consumed, "alerts_refused": self.alerts_refused,
                            "redis_errors": self.redis_errors, "config_version": self.config_version,
                            "config_publish_errors": self.config_publish_errors,
                            "triage_published": self.triage_published}}

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
            self._publish.set()  # analyzers that started before the manager, or with another one, catch up
        return self._client

    def _run(self) -> None:
        import redis

        backoff = 0.5
        while not self._stop.is_set():
            try:
                client = self._connect()
                if self._publish.is_set():
                    self._publish.clear()
                    try:
                        self.config_version = shared_config.publish(client, self._stores)
                    except redis.RedisError:
                        self._publish.set()  # after the reconnect
                        self.config_publish_errors += 1
                        raise
                    log.info("cluster: analysis settings published to the analyzers (version %d)", self.config_version)
                self.triage_published += shared_config.publish_triage(client, self._store)
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
