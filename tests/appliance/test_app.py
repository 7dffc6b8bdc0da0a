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
    original = running.app.pipeline.process
    running.app.pipeline.process = lambda flow: processed.append(flow.flow_id) or original(flow)
    running.app.stop()
    release.set()
    call.cancel()
    assert len(processed) == 1  # the open flow went through analysis before stop() returned
    deadline = time.monotonic() + 10
    while set(_ours_alive()) - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert set(_ours_alive()) - before == set()
