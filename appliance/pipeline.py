"""AnalysisPipeline: the seam from finished flows to detections to correlated alerts.

Flows arrive from the tracker through a bounded queue (overflow is counted, never silent) and
are analysed on one worker thread: every layer sees every flow independently (layer by layer over
a batch, `process_all`), then each flow's detections go to correlation. Layers and the correlator
are handed in by the composition root.

The queue is shared fairly between agents (`analysis.fair_queue`). The same pipeline runs in the
analysis process (`analysis.worker`, the default) or on a thread of the server (`analysis.worker:
thread`); in the process it is driven batch by batch through `process_all`, without its own thread.
"""

from __future__ import annotations

import logging
import operator
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Protocol

from appliance.analysis.fair_queue import FairQueue, QueueFigures
from appliance.flows import record_codec
from appliance.model import DnsMessage, Detection, FlowRecord

log = logging.getLogger(__name__)

_from_event = operator.itemgetter(2)  # of a DnsBatch item (agent_id, message, from_event)


# What a layer's loop over many flows hands a flow whose analysis raised, inside its except block (the pipeline counts
# and logs it, and the layer goes on with the next flow).
FlowFailed = Callable[[FlowRecord], None]
# Flows analysed layer by layer at most this many at a time (see process_all). FlowFacts keeps at least as many flows'
# facts (facts.FACTS_KEPT), so the signature layer reads those the DPI layer parsed in the same batch.
LAYER_BATCH = 256


class AnalysisLayer(Protocol):
    """One independent analysis layer (DPI, signatures, behaviour). A layer may also have
    `analyze_many(flows, failed=None) -> [(index, detections)]`: the same as `analyze` on each flow in turn, one call
    for the list; the pipeline uses it when it is there (`analyze_one_by_one` is what it does otherwise)."""

    name: str

    def analyze(self, flow: FlowRecord) -> list[Detection]:
        """Detections this flow raises (possibly none)."""
        ...


def analyze_one_by_one(analyze: Callable[[FlowRecord], list[Detection]], flows: list[FlowRecord],
                       failed: FlowFailed | None = None) -> list[tuple[int, list[Detection]]]:
    """`analyze_many` from `analyze`: (index, detections) of each flow that raised any, in order. A flow whose analysis
    raises goes to `failed` (inside the except block) and the next goes on; with no `failed` the exception propagates."""
    out: list[tuple[int, list[Detection]]] = []
    for i, flow in enumerate(flows):
        try:
            found = analyze(flow)
        except Exception:
            if failed is None:
                raise
            failed(flow)
            continue
        if found:
            out.append((i, found))
    return out


class DnsObserver(Protocol):
    """A layer that also wants resolver events (StreamDnsEvents) as they arrive."""

    def observe_dns(self, agent_id: str, message: DnsMessage) -> None: ...


class ResolverAnswers(Protocol):
    """What learns from DNS answers (the resolver cache): a serialized batch in place, or decoded items."""

    def observe_batch(self, data: bytes) -> bool: ...

    def observe_many(self, items: list[tuple[str, DnsMessage]]) -> None: ...


class Correlator(Protocol):
    """Turns detections into alerts."""

    def correlate(self, detections: list[Detection]) -> int:
        """Take new detections; return how many alerts were opened."""
        ...


class AnalysisPipeline(QueueFigures):
    """Bounded fair queue plus a worker that runs the layers and the correlator on each flow.

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
        self._queue = FairQueue(queue_size, on_drop)
        self._thread: threading.Thread | None = None
        self.flows_processed = 0
        self.detections_generated = 0
        self.detections_suppressed = 0
        self.alerts_generated = 0
        self.layer_errors = 0

    # -- producer side (must not block) -------------------------------------------------------
    def submit_many(self, flows: list[FlowRecord]) -> None:
        self._queue.put_many(flows)

    def submit(self, flow: FlowRecord) -> None:
        self.submit_many([flow])

    def observe_dns(self, agent_id: str, message: DnsMessage) -> None:
        for layer in self.layers:
            observe = getattr(layer, "observe_dns", None)
            if observe is not None:
                observe(agent_id, message)

    def observe_dns_items(self, items: list[tuple[str, DnsMessage, bool]],
                          observe_answers: Callable[[list[tuple[str, DnsMessage]]], None]) -> None:
        """A DnsBatch's items (record_codec.decode_dns) in their order: resolver events to the layers that
        watch them, answers to `observe_answers` (the resolver cache's observe_many, which reads the first two
        fields of each item) a run at a time: the whole batch at once when it holds no resolver event."""
        if not any(map(_from_event, items)):  # answers only (nearly every batch): no list of pairs made
            if items:
                observe_answers(items)  # type: ignore[arg-type]
            return
        answers: list[tuple[str, DnsMessage]] = []
        for agent_id, message, from_event in items:
            if from_event:
                if answers:
                    observe_answers(answers)
                    answers = []
                self.observe_dns(agent_id, message)
            else:
                answers.append((agent_id, message))
        if answers:
            observe_answers(answers)

    def observe_dns_batch(self, payload: bytes, resolver: ResolverAnswers) -> None:
        """A DnsBatch as it travels (record_codec's encoding). Answers only, nearly every batch, are read in place
        by the resolver cache (`observe_batch`, which changes nothing when it declines); resolver events among
        them (the layers see those too, in order) or anything not plain, as objects. RecordError when broken."""
        if not resolver.observe_batch(payload):
            self.observe_dns_items(record_codec.decode_dns(payload), resolver.observe_many)

    @property
    def queue(self) -> FairQueue:
        return self._queue

    # -- worker -------------------------------------------------------------------------------
    def process(self, flow: FlowRecord) -> list[Detection]:
        """Analyse one flow synchronously (tests and tools; the worker and the analysis process call process_all)."""
        detections: list[Detection] = []
        for layer in self.layers:
            try:
                found = layer.analyze(flow)
            except Exception:  # one broken layer must not stop analysis of the others
                self._layer_failed(layer, flow)
                continue
            if found:  # most flows raise nothing: no call to add nothing
                detections += found
        self.flows_processed += 1
        return self._conclude(detections) if detections else detections

    def process_all(self, flows: list[FlowRecord]) -> None:
        """Analyse flows as `process` does each: every layer sees every flow, a failing layer is counted for that flow
        and the others go on, then each flow's detections (in the layers' order) are concluded in the flows' order; a
        failure there is counted and the next flow goes on.

        Layer by layer over up to LAYER_BATCH flows at a time, not flow by flow: a layer's loop is one call
        (`analyze_many`), so the few flows that raise something cost the Python between the layers, not all of
        them. The layers are independent (none reads what another or correlation writes), so the detections are
        the same as flow by flow's."""
        for start in range(0, len(flows), LAYER_BATCH):
            self._process_batch(flows[start:start + LAYER_BATCH] if len(flows) > LAYER_BATCH else flows)
        self.flows_processed += len(flows)

    def _process_batch(self, flows: list[FlowRecord]) -> None:
        found: dict[int, list[Detection]] = {}
        for layer in self.layers:
            many = getattr(layer, "analyze_many", None)
            failed = partial(self._layer_failed, layer)
            try:
                hits = many(flows, failed) if many is not None else analyze_one_by_one(layer.analyze, flows, failed)
            except Exception:  # the layer's loop itself, not one flow's analysis: the rest of the batch misses it
                self.layer_errors += 1
                log.exception("analysis layer %s failed on a batch of %d flows", layer.name, len(flows))
                continue
            for i, detections in hits:
                kept = found.get(i)
                if kept is None:
                    found[i] = detections
                else:
                    kept += detections  # a list of the layer's own (AnalysisLayer.analyze)
        for i in sorted(found):
            try:
                self._conclude(found[i])
            except Exception:  # exclusions or correlation failed (e.g. SQLite): count, keep going
                self.layer_errors += 1
                log.exception("analysis of flow %s failed after its layers", flows[i].flow_id)

    def _layer_failed(self, layer: AnalysisLayer, flow: FlowRecord) -> None:
        self.layer_errors += 1
        log.exception("analysis layer %s failed on flow %s", layer.name, flow.flow_id)

    def _conclude(self, detections: list[Detection]) -> list[Detection]:
        """A flow's detections: the exclusions' filter, then correlation; the ones kept."""
        if self.detection_filter is not None:
            kept = [d for d in detections if self.detection_filter(d)]
            self.detections_suppressed += len(detections) - len(kept)
            detections = kept
        self.detections_generated += len(detections)
        if detections and self.correlator is not None:
            self.alerts_generated += self.correlator.correlate(detections)
        return detections

    def _run(self) -> None:
        while True:
            batch = self._queue.take_round()
            if batch is None:
                return
            try:
                self.process_all(batch)
            finally:
                self._queue.done(len(batch))

    def start(self) -> None:
        self._queue.reopen()
        self._thread = threading.Thread(target=self._run, name="analysis", daemon=True)
        self._thread.start()

    def drain(self, timeout: float = 30.0) -> bool:
        """Wait until every queued flow has been analysed (used at shutdown and in tests)."""
        if self._thread is None:
            return self._queue.idle
        return self._queue.wait_idle(timeout)

    def stop(self) -> None:
        """Finish what is queued, then stop the worker."""
        if self._thread is None:
            return
        self._queue.close()
        self._thread.join(timeout=30)
        self._thread = None

    def counters(self) -> dict[str, int]:
        """What analysis did, for the metrics (the analysis process reports the same names)."""
        return {"flows_processed": self.flows_processed, "detections_generated": self.detections_generated,
                "detections_suppressed": self.detections_suppressed, "alerts_generated": self.alerts_generated,
                "analysis_errors": self.layer_errors}
