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
