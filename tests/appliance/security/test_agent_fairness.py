"""Item 4: one agent (one certificate) tries to crowd the others out of streams and analysis."""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from appliance.generated import sensor_pb2
from tests.appliance import wire
from tests.appliance.security.conftest import status_probe
from tests.conftest import start_appliance
from tests.polling import wait_for

RST = 0x04


def _meta(machine: str) -> list[tuple[str, str]]:
    return [("x-machine-id", machine)]


def _rst_flows(first_port: int, n: int, ts_ms: int, remote: str) -> sensor_pb2.PacketBatch:
    """n one-packet TCP flows closed by RST: each ends at once and goes to the analysis queue."""
    return sensor_pb2.PacketBatch(packets=[
        wire.packet("10.0.0.5", remote, first_port + i, 443, 6, ts_ms, flags=RST) for i in range(n)])


def test_one_certificate_cannot_hold_more_than_its_streams(appliance):
    app = appliance.app
    cap = app.settings.grpc.max_streams_per_agent
    issued = app.ca.issue_agent("sensor-agent-greedy")
    greedy = appliance.stub(cert=(issued.cert_pem, issued.key_pem))
    release = threading.Event()

    def idle_messages():
        release.wait(30)
        return
        yield  # a generator that sends nothing until released

    held = [greedy.StreamPacketBatches.future(idle_messages(), metadata=_meta(f"greedy-{i}"), timeout=60)
            for i in range(cap)]
    try:
        assert wait_for(lambda: app.agents.online == cap, timeout=30), app.agents.online  # a machine id, an agent
        # The same certificate claiming yet another machine id is refused: streams count per certificate.
        with pytest.raises(grpc.RpcError) as err:
            greedy.StreamPacketBatches(iter([]), metadata=_meta("greedy-more"), timeout=10)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert appliance.rest.get("/api/v1/metrics")[1]["streams_refused_per_agent"] == 1
        # Another agent still gets a stream.
        other = appliance.stub().StreamPacketBatches(iter([_rst_flows(30000, 1, wire.now_ms(), "198.51.100.1")]),
                                                     metadata=_meta("other"), timeout=10)
        assert other.packets_received == 1
    finally:
        release.set()
        for future in held:
            future.result(timeout=30)
    # Closed streams give their places back.
    assert greedy.StreamPacketBatches(iter([]), metadata=_meta("greedy-again"), timeout=10).packets_received == 0


@pytest.fixture
def small_queue(tmp_path, monkeypatch):
    monkeypatch.delenv("SENSOR_ADMIN_TOKEN", raising=False)
    running = start_appliance(tmp_path, limits={"analysis_queue": 50})
    try:
        yield running
    finally:
        running.app.stop()


def test_a_flooding_agent_loses_its_own_flows_not_the_others(small_queue):
    app = small_queue.app
    now_ms = wire.now_ms()
    flood_done = threading.Event()
    flooding = threading.Event()
    victim_done = threading.Event()

    def flood_messages():
        for i in range(400):
            if i == 20:
                flooding.set()
            if i >= 20 and victim_done.is_set():
                return  # enough: the victim sent everything while the flood was on
            yield _rst_flows(1000 + (i * 256) % 60000, 256, now_ms, f"203.0.113.{i % 250 + 1}")

    def flood() -> None:
        small_queue.stub().StreamPacketBatches(flood_messages(), metadata=_meta("flooder"), timeout=120)
        flood_done.set()

    def victim_messages():
        flooding.wait(30)
        for i in range(10):
            time.sleep(0.01)
            yield _rst_flows(20000 + 2 * i, 2, now_ms, "198.51.100.7")
        victim_done.set()

    flooder = threading.Thread(target=flood)
    with status_probe(small_queue):
        flooder.start()
        victim = small_queue.stub().StreamPacketBatches(victim_messages(), metadata=_meta("victim"), timeout=60)
        flooder.join(timeout=120)
    assert flood_done.is_set() and victim.packets_received == 20
    assert app.pipeline.drain(30)
    metrics = small_queue.rest.get("/api/v1/metrics")[1]
    agents = {a["hostname"] or a["id"]: a for a in small_queue.rest.get("/api/v1/agents")[1]["agents"]}
    by_id = {a["id"]: a for a in agents.values()}
    flooder_id = next(i for i in by_id if i != victim.agent_id)
    # The queue overflowed, and only the flooder paid for it: every victim flow was analysed.
    assert metrics["analysis_queue_dropped"] > 0
    assert metrics["analysis_dropped_by_agent"] == {flooder_id: metrics["analysis_queue_dropped"]}
    assert by_id[victim.agent_id]["analysis_dropped"] == 0
    assert by_id[flooder_id]["analysis_dropped"] == metrics["analysis_queue_dropped"]
