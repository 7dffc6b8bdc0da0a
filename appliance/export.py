"""Alerts and flow records out of the box, as JSON lines a SIEM shipper tails (Filebeat, Vector).

One shape, close to Suricata's EVE so that existing pipelines map it with little work: every line is one
JSON object with `timestamp`, `event_type` ("alert" or "flow"), the agent and the five-tuple, and an
`alert` or `flow` object. The shape is `appliance/export_schema.json` (JSON Schema); docs/export.md
describes it field by field.

Writing never blocks ingestion or analysis: flow records go into a bounded queue as they are (the fields exported
do not change once a flow has ended) and become lines on the writer thread, so the ingest thread that hands flows over
pays one append per flow; alerts, which change after they are published, are rendered at once. When the
queue is full the event is dropped and counted (`export.dropped` in the metrics). Files rotate by size the
way shippers expect (rename: `eve.json` -> `eve.json.1` ... `eve.json.<keep>`, then a new `eve.json`).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import threading
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from appliance.detection.alert import Alert
from appliance.flows.tracker import community_id
from appliance.model import FlowRecord, Severity

log = logging.getLogger(__name__)

SCHEMA_FILE = Path(__file__).resolve().parent / "export_schema.json"
VERSION = 1


def _iso_ns(ns: int) -> str:
    return dt.datetime.fromtimestamp(ns / 1e9, dt.timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _ip(value: int) -> str:
    return f"{value >> 24 & 255}.{value >> 16 & 255}.{value >> 8 & 255}.{value & 255}"


def flow_event(flow: FlowRecord) -> dict[str, Any]:
    """A finished flow as one export line (the agent's side is `src`, as the agent saw the flow)."""
    return {
        "timestamp": _iso_ns(flow.last_ns), "event_type": "flow", "version": VERSION,
        "agent_id": flow.agent_id, "flow_id": flow.flow_id,
        "community_id": community_id(flow.protocol, flow.local_ip, flow.local_port, flow.remote_ip, flow.remote_port),
        "src_ip": _ip(flow.local_ip), "src_port": flow.local_port, "dest_ip": _ip(flow.remote_ip),
        "dest_port": flow.remote_port, "proto": flow.transport.name.lower(),
        "flow": {
            "start": _iso_ns(flow.first_ns), "end": _iso_ns(flow.last_ns), "end_reason": flow.end_reason,
            "pkts_toserver": flow.packets_out, "pkts_toclient": flow.packets_in,
            "bytes_toserver": flow.bytes_out, "bytes_toclient": flow.bytes_in,
            "process": flow.process_name or None, "pid": flow.pid or None,
        },
    }


def alert_event(event: str, alert: Alert) -> dict[str, Any]:
    """An alert opened or updated by correlation, as one export line."""
    return {
        "timestamp": _iso_ns(alert.last_ns), "event_type": "alert", "version": VERSION,
        "agent_id": alert.agent_id,
        "alert": {
            "id": alert.id, "event": event, "category": alert.category, "severity": Severity(alert.severity).label,
            "confidence": round(alert.confidence, 4), "summary": alert.summary, "indicator": alert.indicator,
            "status": alert.status, "first_seen": _iso_ns(alert.first_ns), "last_seen": _iso_ns(alert.last_ns),
            "detections": [{"detector": d["detector"], "confidence": d["confidence"], "flow_ids": d.get("flow_ids", [])[:50]}
                           for d in alert.detections[:50]],
        },
    }


class JsonLinesExporter:
    """Writes export lines to `path` from its own thread; bounded, rotating, never blocking the caller."""

    def __init__(self, path: Path, *, flows: bool, alerts: bool, queue_size: int, max_bytes: int, keep: int) -> None:
        self.path = path
        self.flows_enabled, self.alerts_enabled = flows, alerts
        self._queue: deque[FlowRecord | dict[str, Any]] = deque()  # records, or alert lines already rendered
        self._queue_size, self._max_bytes, self._keep = queue_size, max_bytes, keep
        self._cond = threading.Condition()
        self._stop = False
        self._writing = False
        self._thread: threading.Thread | None = None
        self.written = 0
        self.dropped = 0
        self.rotations = 0
        self.write_errors = 0

    # -- producers (tracker hand-off, alert channel) ---------------------------------------------
    def flows(self, flows: Iterable[FlowRecord]) -> None:
        if self.flows_enabled:
            self._put(list(flows))

    def alert(self, event: str, alert: Alert) -> None:
        if self.alerts_enabled:
            self._put([alert_event(event, alert)])

    def _put(self, events: list[FlowRecord | dict[str, Any]]) -> None:
        with self._cond:
            room = self._queue_size - len(self._queue)
            if room < len(events):
                self.dropped += len(events) - max(room, 0)
                events = events[:max(room, 0)]
            self._queue.extend(events)
            self._cond.notify_all()

    # -- writer ------------------------------------------------------------------------------------
    def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._run, name="export", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Write what is queued, then stop."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every queued line is written (a drain: what analysis saw is in the file)."""
        with self._cond:
            return self._thread is None or self._cond.wait_for(lambda: not self._queue and not self._writing, timeout)

    def _run(self) -> None:
        handle = self._open()
        try:
            while True:
                with self._cond:
                    self._writing = False
                    self._cond.notify_all()
                    while not self._queue and not self._stop:
                        self._cond.wait()
                    if not self._queue and self._stop:
                        return
                    batch = list(self._queue)
                    self._queue.clear()
                    self._writing = True
                handle = self._write(handle, batch)
        finally:
            handle.close()

    def _open(self) -> Any:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
        return os.fdopen(fd, "a", encoding="utf-8")

    def _write(self, handle: Any, batch: list[FlowRecord | dict[str, Any]]) -> Any:
        try:
            for item in batch:
                event = flow_event(item) if isinstance(item, FlowRecord) else item
                handle.write(json.dumps(event, separators=(",", ":"), ensure_ascii=False) + "\n")
                self.written += 1
                if handle.tell() >= self._max_bytes:
                    handle.close()
                    self._rotate()
                    handle = self._open()
            handle.flush()
        except OSError as err:  # a full disk must not stop analysis: count, log once per batch, go on
            self.write_errors += 1
            log.error("export: cannot write %s: %s", self.path, err)
        return handle

    def _rotate(self) -> None:
        for i in range(self._keep - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{i}")
            if older.exists():
                os.replace(older, self.path.with_name(f"{self.path.name}.{i + 1}"))
        os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
        self.rotations += 1

    def stats(self) -> dict[str, int]:
        return {"written": self.written, "dropped": self.dropped, "rotations": self.rotations,
                "write_errors": self.write_errors, "queued": len(self._queue)}
