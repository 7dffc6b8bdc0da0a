"""AnalysisPipeline: the seam from finished flows to detections to correlated alerts.

Flows arrive from the tracker through a bounded queue (overflow is counted, never silent) and
are analysed on one worker thread: every layer sees every flow independently, then the
detections go to correlation. Layers and the correlator are handed in by the composition root.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Protocol

from appliance.model import DnsMessage, Detection, FlowRecord

log = logging.getLogger(__name__)


class AnalysisLayer(Protocol):
    """One independent analysis layer (DPI, signatures, behaviour)."""

    name: str

    def analyze(self, flow: FlowRecord) -> list[Detection]:
        """Detections this flow raises (possibly none)."""
        ...


class DnsObserver(Protocol):
    """A layer that also wants resolver events (StreamDnsEvents) as they arrive."""

    def observe_dns(self, agent_id: str, message: DnsMessage) -> None: ...


class Correlator(Protocol):
    """Turns detections into alerts."""

    def correlate(self, detections: list[Detection]) -> int:
        """Take new detections; return how many alerts were opened."""
        ...


class AnalysisPipeline:
    """Bounded queue plus a worker that runs the layers and the correlator on each flow.

    The queue holds at most `queue_size` flows; what does not fit is dropped and counted in
    `flows_dropped`. Producers hand over lists and the worker takes everything pending at once,
    so a busy tracker wakes the worker once per batch, not once per flow.
    """

    def __init__(
        self,
        layers: Sequence[AnalysisLayer] = (),
        correlator: Correlator | None = None,
        queue_size: int = 10_000,
        detection_filter: Callable[[Detection], bool] | None = None,
    ) -> None:
        self.layers = list(layers)
        self.correlator = correlator
        self.detection_filter = detection_filter
        self.queue_size = queue_size
        self._pending: deque[FlowRecord] = deque()
        self._busy = 0
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.flows_processed = 0
        self.flows_dropped = 0
        self.detections_generated = 0
        self.detections_suppressed = 0
        self.alerts_generated = 0
        self.layer_errors = 0

    # -- producer side (called under the tracker lock: must not block) --------------------
    def submit_many(self, flows: list[FlowRecord]) -> None:
        with self._cond:
            room = self.queue_size - len(self._pending) - self._busy
            if room < len(flows):
                self.flows_dropped += len(flows) - max(room, 0)
                flows = flows[: max(room, 0)]
            if flows:
                self._pending.extend(flows)
                self._cond.notify()

    def submit(self, flow: FlowRecord) -> None:
        self.submit_many([flow])

    def observe_dns(self, agent_id: str, message: DnsMessage) -> None:
        for layer in self.layers:
            observe = getattr(layer, "observe_dns", None)
            if observe is not None:
                observe(agent_id, message)

    @property
    def queue_depth(self) -> int:
        return len(self._pending)

    # -- worker -------------------------------------------------------------------------------
    def process(self, flow: FlowRecord) -> list[Detection]:
        """Analyse one flow synchronously (the worker's body; also used by benchmarks)."""
        detections: list[Detection] = []
        for layer in self.layers:
            try:
                detections.extend(layer.analyze(flow))
            except Exception:  # one broken layer must not stop analysis of the others
                self.layer_errors += 1
                log.exception("analysis layer %s failed on flow %s", layer.name, flow.flow_id)
        self.flows_processed += 1
        if self.detection_filter is not None and detections:
            kept = [d for d in detections if self.detection_filter(d)]
            self.detections_suppressed += len(detections) - len(kept)
            detections = kept
        self.detections_generated += len(detections)
        if detections and self.correlator is not None:
            self.alerts_generated += self.correlator.correlate(detections)
        return detections

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._stopping:
                    self._cond.wait()
                if not self._pending and self._stopping:
                    return
                batch = list(self._pending)
                self._pending.clear()
                self._busy = len(batch)
            for flow in batch:
                try:
                    self.process(flow)
                except Exception:  # exclusions or correlation failed (e.g. SQLite): count, keep going
                    self.layer_errors += 1
                    log.exception("analysis of flow %s failed after its layers", flow.flow_id)
                self._busy -= 1
            with self._cond:
                self._busy = 0
                self._cond.notify_all()

    def start(self) -> None:
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="analysis", daemon=True)
        self._thread.start()

    def drain(self, timeout: float = 30.0) -> bool:
        """Wait until every queued flow has been analysed (used at shutdown and in tests)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending or self._busy:
                left = deadline - time.monotonic()
                if left <= 0 or self._thread is None:
                    return False
                self._cond.wait(min(left, 0.1))
        return True

    def stop(self) -> None:
        """Finish what is queued, then stop the worker."""
        if self._thread is None:
            return
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(timeout=30)
        self._thread = None
