"""The composition root's lifecycle: what start() opens, stop() closes."""

import threading
import time

from tests.appliance import wire
from tests.conftest import start_appliance
from tests.polling import wait_for


def _ours_alive():
    names = ("grpc", "flow-sweep", "analysis", "metrics-history", "rest")
    return [t.name for t in threading.enumerate() if t.name.startswith(names) and t.is_alive()]


def test_stop_flushes_flows_and_leaves_no_thread_behind(tmp_path, monkeypatch):
    monkeypatch.delenv("SENSOR_ADMIN_TOKEN", raising=False)
    before = set(_ours_alive())
    running = start_appliance(tmp_path)
    stub = running.stub()
    import threading as th
    release = th.Event()

    def messages():
        from appliance.generated import sensor_pb2
        yield sensor_pb2.PacketBatch(packets=[wire.packet()])
        release.wait(60)  # the stream stays open until stop() has run (its end would flush the flow itself)

    call = stub.StreamPacketBatches.future(messages(), metadata=[("x-machine-id", "m")])
    assert wait_for(lambda: running.app.tracker.active_flows > 0, timeout=15), "the flow never opened"
    processed = []
    running.app.pipeline.correlator = None
    original = running.app.pipeline.process_all  # what the analysis thread runs on each batch
    running.app.pipeline.process_all = lambda flows: processed.extend(f.flow_id for f in flows) or original(flows)
    running.app.stop()
    release.set()
    call.cancel()
    assert len(processed) == 1  # the open flow went through analysis before stop() returned
    deadline = time.monotonic() + 10
    while set(_ours_alive()) - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert set(_ours_alive()) - before == set()


def test_an_analysis_process_collects_garbage_on_a_timer_not_on_allocations():
    """Automatic collection off (allocations never trigger a pass), a full collection every `every`
    seconds: a cycle made after start-up is gone within a few periods, and the timer stops with `stop`."""
    import gc
    import weakref

    from appliance.app import tune_analysis_garbage_collector

    class Node:
        pass

    thresholds, stop = gc.get_threshold(), threading.Event()
    try:
        thread = tune_analysis_garbage_collector(stop, every=0.05)
        assert not gc.isenabled()
        count = gc.get_count()[0]
        kept = [[] for _ in range(thresholds[0] + 10)]  # more tracked objects than would trigger a pass
        assert gc.get_count()[0] >= count + len(kept)  # none ran: the count only grew
        cycle = Node()
        cycle.me = cycle
        gone = weakref.ref(cycle)
        del cycle, kept
        assert wait_for(lambda: gone() is None, timeout=5), "the timed collection never ran"
        stop.set()
        thread.join(timeout=5)
        assert not thread.is_alive()
    finally:
        stop.set()
        gc.unfreeze()
        gc.enable()
        gc.set_threshold(*thresholds)


def test_the_servers_flow_table_keeps_samples_only_of_the_protocols_analysis_reads(tmp_path):
    """As build() wires it: a TCP flow keeps its payload sample, a DNS flow its messages but no samples."""
    from appliance.app import build
    from appliance.config import parse_settings
    from appliance.ingest.convert import PacketConverter

    app = build(parse_settings({"grpc": {"listen": "127.0.0.1:0", "tls": False}, "rest": {"listen": "127.0.0.1:0", "tls": False},
                                "paths": {"state_dir": str(tmp_path)}, "analysis": {"worker": "off"}}, "test"))
    try:
        now_ms = wire.now_ms()
        packets = PacketConverter().read([
            wire.packet(ts_ms=now_ms, payload=b"\x16\x03\x01 hello"),
            wire.udp_out("10.0.0.5", "10.0.0.1", 4000, 53, wire.dns_query("www.example.org"), ts_ms=now_ms + 1),
        ], (now_ms + 1000) * 1_000_000)
        app.tracker.add_packets("agent-1", packets)
        kept = {f.protocol: (len(f.samples), len(f.dns)) for f in app.tracker.snapshot()}
        assert kept == {6: (1, 0), 17: (0, 1)}
    finally:
        app.stop()
