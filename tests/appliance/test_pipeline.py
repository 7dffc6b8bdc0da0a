import pytest

from appliance.model import Category, Detection, FlowRecord, Severity, Transport
from appliance.pipeline import LAYER_BATCH, AnalysisPipeline, analyze_one_by_one


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


class Many(Layer):
    """A layer with its own loop over many flows: flags every other flow, records the lists it was given."""

    name = "many"

    def __init__(self):
        self.batches = []

    def analyze(self, f):
        raise AssertionError("the pipeline calls analyze_many when a layer has one")

    def analyze_many(self, flows, failed=None):
        self.batches.append(len(flows))
        return [(i, super(Many, self).analyze(f)) for i, f in enumerate(flows) if int(f.flow_id[1:]) % 2 == 0]


class BrokenLoop(Layer):
    name = "broken-loop"

    def analyze_many(self, flows, failed=None):
        raise RuntimeError("the loop itself")


def test_process_all_runs_each_layer_over_batches_and_concludes_each_flow_in_order():
    correlator = Correlator()
    many = Many()
    pipeline = AnalysisPipeline([Layer(), BrokenLoop(), many], correlator)
    flows = [flow(i) for i in range(LAYER_BATCH + 10)]
    pipeline.process_all(flows)
    assert many.batches == [LAYER_BATCH, 10]  # at most LAYER_BATCH at a time (FlowFacts keeps a batch's facts)
    assert pipeline.flows_processed == LAYER_BATCH + 10
    assert pipeline.layer_errors == 2  # the broken loop, once per batch; the layers after it still ran
    # one list per flow, in the flows' order: the first layer's detection, then the other-flow layer's
    seen = [d.flow_ids[0] for d in correlator.seen]
    assert seen == [f for i in range(LAYER_BATCH + 10) for f in [f"f{i}"] * (2 if i % 2 == 0 else 1)]
    assert pipeline.alerts_generated == LAYER_BATCH + 10


def test_analyze_one_by_one_hands_a_failing_flow_to_failed_and_goes_on():
    failed = []
    flows = [flow(i) for i in range(3)]

    def analyze(f):
        if f.flow_id == "f1":
            raise ValueError("bad flow")
        return Layer().analyze(f)

    hits = analyze_one_by_one(analyze, flows, failed.append)
    assert [i for i, _ in hits] == [0, 2] and failed == [flows[1]]
    with pytest.raises(ValueError):
        analyze_one_by_one(analyze, flows)  # no failed: the exception is the caller's


@pytest.fixture(scope="module")
def corpus_flows():
    from bench.pipeline_bench import corpus, finished_flows

    return finished_flows(corpus())


def _corpus_run(flows, tmp_path, batched):
    """Detections (ids blanked) the bench's appliance concludes on the corpus, flow by flow or in 300-flow lists."""
    import dataclasses

    from appliance.app import build
    from bench.pipeline_bench import settings

    app = build(settings(tmp_path))
    pipeline, parts = app.pipeline, app.detection
    concluded = []
    correlate = pipeline.correlator.correlate
    pipeline.correlator.correlate = lambda detections: concluded.extend(detections) or correlate(detections)
    for f in flows:
        for message in f.dns:
            if message.is_response:
                parts.resolver.observe(f.agent_id, message)
    if batched:
        for start in range(0, len(flows), 300):
            pipeline.process_all(flows[start:start + 300])
    else:
        for f in flows:
            pipeline.process(f)
    alerts = sorted((a.category, a.agent_id) for a in parts.alerts.query(limit=1000))
    figures = (pipeline.layer_errors, pipeline.flows_processed, parts.facts.tls_handshakes, parts.facts.tls_incomplete)
    parts.db.close()
    return [dataclasses.replace(d, id="") for d in concluded], alerts, figures


def test_layer_by_layer_concludes_what_flow_by_flow_does_on_the_bench_corpus(corpus_flows, tmp_path):
    import dataclasses

    got = _corpus_run([dataclasses.replace(f, tls=None) for f in corpus_flows], tmp_path / "batched", batched=True)
    want = _corpus_run([dataclasses.replace(f, tls=None) for f in corpus_flows], tmp_path / "one", batched=False)
    assert got == want
    detections, alerts, (errors, processed, handshakes, _) = got
    assert errors == 0 and processed == len(corpus_flows)
    assert handshakes > 4000  # each TLS flow's hellos read once, though two layers ask for them in another order
    # every layer and every DPI analyzer reached (the DNS and DGA judges, TLS, HTTP, ICMP), and the scenarios' alerts
    assert {d.detector for d in detections} >= {"dpi.tls.raw_ip", "dpi.dns.tunnel_names", "dpi.dns.flood_rate", "dpi.dns.nx_burst",
                                                "dpi.http.encoded_data", "dpi.icmp.payload", "behaviour.beaconing",
                                                "signature:SIG-DNS-001", "signature:SIG-TLS-001"}
    assert len(alerts) == 10
