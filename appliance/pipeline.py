"""AnalysisPipeline: the seam from finished flows to detections to correlated alerts.

Flows arrive from the tracker through a bounded queue (overflow is counted, never silent) and
are analysed on one worker thread: every layer sees every flow independently, then the
detections go to correlation. Layers and the correlator are handed in by the composition root.

The queue is shared fairly between agents: each agent has its own line, the worker serves the
lines in turn, and when the queue is full a newcomer takes the place of the newest flow of the
agent holding the most. One agent's flood therefore costs that agent's flows, not the others'.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from typing import Protocol

from appliance.model import DnsMessage, Detection, FlowRecord

log = logging.getLogger(__name__)

# Flows taken from each agent's line per round of the worker: fair to within this many flows,
# without taking the lock once per flow.
_PER_AGENT_ROUND = 16


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
    `flows_dropped` and, per agent, in `dropped_by_agent` (reported to `on_drop` too). Producers
    hand over lists and the worker takes one round of the agents' lines at a time, so a busy
    tracker wakes the worker once per batch, not once per flow.
    """

    def __init__(
        self,
        layers: Sequence[AnalysisLayer] = (),
        correlator: Correlator | None = None,
        queue_size: int = 10_000,
        detection_filter: Callable[[Detection], bool] | None = None,
        on_drop: Callable[[str, int], None] | None = None,
    ) -> None:
        self.layers = list(layers)
        self.correlator = correlator
        self.detection_filter = detection_filter
        self.queue_size = queue_size
        self._lines: dict[str, deque[FlowRecord]] = {}  # agent id -> its waiting flows, served in turn
        self._depth = 0
        self._busy = 0
        self._on_drop = on_drop
        self.dropped_by_agent: Counter[str] = Counter()
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
        dropped: Counter[str] = Counter()
        with self._cond:
            for flow in flows:
                victim = self._admit(flow)
                if victim is not None:
                    dropped[victim] += 1
            if dropped:
                self.flows_dropped += sum(dropped.values())
                self.dropped_by_agent.update(dropped)
            if self._depth:
                self._cond.notify()
        if dropped and self._on_drop is not None:
            for agent_id, count in dropped.items():
                self._on_drop(agent_id, count)

    def _admit(self, flow: FlowRecord) -> str | None:
        """Queue one flow (under the lock); the agent whose flow was dropped to keep the bound, if any."""
        line = self._lines.get(flow.agent_id)
        mine = len(line) if line is not None else 0
        if self._depth + self._busy >= self.queue_size:
            longest_id, longest = max(self._lines.items(), key=lambda item: len(item[1]), default=("", deque()))
            if longest_id == flow.agent_id or len(longest) <= mine + 1:
                return flow.agent_id  # this agent already holds its share: its new flow is the one dropped
            longest.pop()  # the newest flow of the agent holding the most makes room
            self._depth -= 1
            victim: str | None = longest_id
        else:
            victim = None
        if line is None:
            line = self._lines[flow.agent_id] = deque()
        line.append(flow)
        self._depth += 1
        return victim

    def submit(self, flow: FlowRecord) -> None:
        self.submit_many([flow])

    def observe_dns(self, agent_id: str, message: DnsMessage) -> None:
        for layer in self.layers:
            observe = getattr(layer, "observe_dns", None)
            if observe is not None:
                observe(agent_id, message)

    @property
    def queue_depth(self) -> int:
        return self._depth

    def _take_round(self) -> list[FlowRecord]:
        """A few flows from each agent's line, in turn (under the lock); empty lines are removed."""
        batch: list[FlowRecord] = []
        for agent_id in list(self._lines):
            line = self._lines[agent_id]
            for _ in range(min(len(line), _PER_AGENT_ROUND)):
                batch.append(line.popleft())
            if not line:
                del self._lines[agent_id]
        self._depth -= len(batch)
        return batch

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
                while not self._depth and not self._stopping:
                    self._cond.wait()
                if not self._depth and self._stopping:
                    return
                batch = self._take_round()
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
            while self._depth or self._busy:
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
