"""LocalAnalysis: analysis on a thread of the server process (`analysis.worker: thread`).

The same face as `AnalysisProcess`, so the composition root hands flows to either: the pipeline's
own queue and thread, the resolver cache and the export all live in this process. Used where one
process is wanted (tests that reach into the layers, debugging); the default is the process.
"""

from __future__ import annotations

from typing import Any

from appliance.analysis.fair_queue import QueueFigures
from appliance.detection import DetectionParts
from appliance.flows.record_codec import AnyDns, dns_message_of
from appliance.model import DnsMessage, FlowRecord
from appliance.pipeline import AnalysisPipeline


def analysis_counters(parts: DetectionParts, pipeline: AnalysisPipeline) -> dict[str, Any]:
    """What analysis did, by metric name (the analysis process reports the same dict)."""
    facts = parts.facts
    return {
        **pipeline.counters(),
        "tls_handshakes": facts.tls_handshakes,
        "tls_handshakes_incomplete": facts.tls_incomplete,
        "tls_handshakes_unreadable": facts.tls_unreadable,
        "tls_certificates_unreadable": facts.tls_certificates_unreadable,
        "alerts_updated": parts.correlator.alerts_updated,
        "export": parts.exporter.stats() if parts.exporter is not None else {},
    }


class LocalAnalysis(QueueFigures):
    """Flows, DNS answers and resolver events into the in-process pipeline."""

    mode = "thread"

    def __init__(self, parts: DetectionParts, pipeline: AnalysisPipeline) -> None:
        self.parts = parts
        self.pipeline = pipeline
        self._queue = pipeline.queue

    def submit_many(self, flows: list[FlowRecord]) -> None:
        if self.parts.exporter is not None:
            self.parts.exporter.flows(flows)
        self.pipeline.submit_many(flows)

    def observe_answers(self, answers: list[tuple[str, AnyDns]]) -> None:
        self.parts.resolver.observe_many([(agent_id, dns_message_of(message)) for agent_id, message in answers])

    def observe_dns(self, agent_id: str, message: DnsMessage) -> None:
        self.pipeline.observe_dns(agent_id, message)

    def reload(self) -> None:
        """Nothing to do: the stores the REST layer changes are the ones analysis reads."""

    def counter(self, name: str) -> int:
        return int(analysis_counters(self.parts, self.pipeline).get(name, 0))

    def export_stats(self) -> dict[str, Any]:
        return self.parts.exporter.stats() if self.parts.exporter is not None else {}

    def status(self) -> dict[str, Any]:
        signatures = self.parts.signatures
        return {"mode": self.mode, "running": True, "pid": 0, "restarts": 0, "flows_lost": 0, "dns_dropped": 0,
                "flows_not_analysed": 0, "frames_refused": 0, "signature_rules": signatures.loaded,
                "signature_reloads": signatures.reloads}

    def spawn(self) -> None:
        """Nothing to start early: the thread starts with the appliance."""

    def start(self) -> None:
        if self.parts.exporter is not None:
            self.parts.exporter.start()
        self.pipeline.start()

    def drain(self, timeout: float = 30.0) -> bool:
        return self.pipeline.drain(timeout)

    def stop(self) -> None:
        self.pipeline.stop()
        if self.parts.exporter is not None:
            self.parts.exporter.stop()  # after the drain: the flushed flows and their alerts are written too


class NoAnalysis:
    """`analysis.worker: off`: ended flows are counted and forgotten (ingestion alone; a collecting box).

    The appliance says so where it matters: a warning at start, `analysis_worker.mode` "off" in the
    metrics, and `flows_not_analysed` counting what went by.
    """

    mode = "off"

    def __init__(self) -> None:
        self.flows_not_analysed = 0

    def submit_many(self, flows: list[FlowRecord]) -> None:
        self.flows_not_analysed += len(flows)

    def observe_answers(self, answers: list[tuple[str, AnyDns]]) -> None:
        pass

    def observe_dns(self, agent_id: str, message: DnsMessage) -> None:
        pass

    def reload(self) -> None:
        pass

    queue_depth = 0
    oldest_wait_s = 0.0
    flows_dropped = 0
    dropped_by_agent: dict[str, int] = {}

    def counter(self, name: str) -> int:
        return 0

    def export_stats(self) -> dict[str, Any]:
        return {}

    def status(self) -> dict[str, Any]:
        return {"mode": self.mode, "running": False, "pid": 0, "restarts": 0, "flows_lost": 0, "dns_dropped": 0,
                "flows_not_analysed": self.flows_not_analysed, "frames_refused": 0}

    def spawn(self) -> None:
        pass

    def start(self) -> None:
        pass

    def drain(self, timeout: float = 30.0) -> bool:
        return True

    def stop(self) -> None:
        pass
