from appliance.model import Category, Detection, FlowRecord, Severity, Transport
from appliance.pipeline import AnalysisPipeline


def flow(i=0):
    return FlowRecord(f"f{i}", "agent", 6, Transport.TCP, 1, 2, 3, 4, 0, 0)


class Layer:
    name = "fake"

    def analyze(self, f):
        return [Detection("fake", Category.BEACONING, 0.5, Severity.LOW, f.agent_id, "1.2.3.4", flow_ids=[f.flow_id])]


class Broken:
    name = "broken"

    def analyze(self, f):
        raise RuntimeError("boom")


class Correlator:
    def __init__(self):
        self.seen = []

    def correlate(self, detections):
        self.seen.extend(detections)
        return 1


def test_queue_overflow_is_counted_not_silent():
    pipeline = AnalysisPipeline(queue_size=2)
    for i in range(5):
        pipeline.submit(flow(i))
    assert pipeline.flows_dropped == 3
    assert pipeline.queue_depth == 2


def test_every_layer_sees_every_flow_and_a_broken_layer_is_contained():
    correlator = Correlator()
    pipeline = AnalysisPipeline([Broken(), Layer()], correlator, queue_size=10)
    pipeline.start()
    for i in range(3):
        pipeline.submit(flow(i))
    assert pipeline.drain()
    pipeline.stop()
    assert pipeline.flows_processed == 3
    assert pipeline.layer_errors == 3
    assert [d.flow_ids for d in correlator.seen] == [["f0"], ["f1"], ["f2"]]
    assert pipeline.alerts_generated == 3 and pipeline.detections_generated == 3


def test_detection_filter_suppresses_and_counts():
    pipeline = AnalysisPipeline([Layer()], None, detection_filter=lambda d: False)
    assert pipeline.process(flow()) == []
    assert pipeline.detections_suppressed == 1 and pipeline.detections_generated == 0


class FailsOnSecond(Correlator):
    def correlate(self, detections):
        if len(self.seen) == 1:
            self.seen.append(None)
            raise RuntimeError("database is locked")
        return super().correlate(detections)


def test_process_all_contains_a_broken_layer_and_a_failed_correlation_flow_by_flow():
    correlator = FailsOnSecond()
    pipeline = AnalysisPipeline([Broken(), Layer()], correlator, detection_filter=lambda d: d.flow_ids != ["f1"])
    pipeline.process_all([flow(i) for i in range(4)])
    assert pipeline.flows_processed == 4
    assert pipeline.layer_errors == 4 + 1  # the broken layer on every flow, the correlation of f2
    assert pipeline.detections_suppressed == 1  # f1's
    assert [d.flow_ids if d else None for d in correlator.seen] == [["f0"], None, ["f3"]]
    assert pipeline.alerts_generated == 2


class Watcher:
    name = "watcher"

    def __init__(self, log):
        self.log = log

    def analyze(self, f):
        return []

    def observe_dns(self, agent_id, message):
        self.log.append(("event", agent_id, message))


def test_dns_items_reach_the_answers_and_the_event_watchers_in_their_order():
    log = []
    pipeline = AnalysisPipeline([Watcher(log)])
    observe = lambda items: log.append(("answers", [(item[0], item[1]) for item in items]))  # noqa: E731
    pipeline.observe_dns_items([("a", "m1", False), ("b", "m2", False)], observe)  # answers only: one run
    assert log == [("answers", [("a", "m1"), ("b", "m2")])]
    log.clear()
    pipeline.observe_dns_items([("a", "m1", False), ("a", "e1", True), ("b", "e2", True), ("b", "m2", False),
                                ("c", "m3", False)], observe)
    assert log == [("answers", [("a", "m1")]), ("event", "a", "e1"), ("event", "b", "e2"),
                   ("answers", [("b", "m2"), ("c", "m3")])]
    log.clear()
    pipeline.observe_dns_items([], observe)
    assert log == []
