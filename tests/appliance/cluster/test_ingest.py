"""The ingest node's sink over a real redis-server: MAXLEN back-pressure is counted exactly, and an
unreachable Redis costs counted drops, never the gRPC streams; the node connects again by itself."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from appliance.cluster import bus
from appliance.cluster.analyzer import Analyzer
from tests.appliance.cluster.conftest import RedisServer, redis_totals
from tests.appliance.cluster.test_cluster import many_flows
from tests.appliance.detection import scenarios as sc
from tests.conftest import RunningAppliance, start_appliance
from tests.polling import wait_for

PARTITIONS = 2


@pytest.fixture
def ingest_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.delenv("SENSOR_ADMIN_TOKEN", raising=False)
    (tmp_path / "signatures").mkdir()
    started: list[RunningAppliance] = []

    def start(redis_url: str, **cluster: Any) -> RunningAppliance:
        limits = cluster.pop("limits", {})
        running = start_appliance(tmp_path, limits=limits, cluster={"role": "ingest", "redis_url": redis_url,
                                                                    "partitions": PARTITIONS, **cluster})
        started.append(running)
        return running

    yield start
    for running in started:
        running.app.stop()


def stream_entries(client: Any) -> tuple[int, int]:
    """(entries, flows) still in the partition streams."""
    entries = flows = 0
    for p in range(PARTITIONS):
        for _, fields in client.xrange(bus.flows_key(p)):
            entries += 1
            flows += int(fields[b"n"])
    return entries, flows


def test_maxlen_trims_unread_entries_and_counts_every_flow_it_drops(ingest_node: Any, redis_server: RedisServer,
                                                                   tmp_path: Path) -> None:
    node = ingest_node(redis_server.url, stream_maxlen=3)
    stub = node.stub()
    for agent in range(6):  # no analyzer runs: the streams only grow, and MAXLEN holds them at 3 entries
        assert sc.stream(stub, many_flows(agent, 300)) == 300
    assert node.app.analysis.drain()
    client = redis_server.client()
    totals = redis_totals(client, PARTITIONS)
    entries, left = stream_entries(client)
    assert totals["added"] == 6 * 300 == node.app.tracker.flows_created
    assert entries <= 3 * PARTITIONS and totals["trimmed"] > 0
    assert totals["trimmed"] + left == totals["added"]  # exact: every flow is either still there or counted
    status = wait_for(lambda: (w := node.rest.get("/api/v1/metrics")[1]["analysis_worker"])["cluster"]["flows_trimmed_unread"]
                      == totals["trimmed"] and w, timeout=10)
    assert status and status["mode"] == "ingest" and status["cluster"]["flows_appended"] == totals["added"]

    # An analyzer arriving late analyses what is left: analysed + trimmed == added, nothing else lost.
    settings = node.app.settings.model_copy(update={"cluster": node.app.settings.cluster.model_copy(
        update={"role": "analyzer", "node_id": "late", "lease_seconds": 2})})
    settings = settings.model_copy(update={"paths": settings.paths.model_copy(update={"state_dir": tmp_path / "analyzer"})})
    analyzer = Analyzer(settings)
    analyzer.start()
    try:
        done = wait_for(lambda: (t := redis_totals(client, PARTITIONS)).get("analysed", 0) == left and t, timeout=30)
    finally:
        analyzer.stop()
    assert done and done["analysed"] + done["trimmed"] == done["added"]
    assert analyzer.flows_analysed == left and analyzer.entries_refused == 0


def test_with_redis_down_ingest_keeps_serving_and_counts_its_drops_then_connects_again(ingest_node: Any,
                                                                                      tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis")  # a port nothing listens on yet
    (tmp_path / "redis").mkdir()
    node = ingest_node(server.url, limits={"analysis_queue": 100})
    stub = node.stub()
    first = many_flows(0, 500)
    assert sc.stream(stub, first) == 500  # the stream is served in full
    assert node.app.analysis.drain()
    status, metrics = node.rest.get("/api/v1/metrics")
    assert status == 200
    worker = metrics["analysis_worker"]
    assert metrics["flows_created"] == 500
    # Every flow is dropped and counted: by the full queue in front, or by the sender with Redis away.
    assert node.app.analysis.flows_dropped == 500 and worker["cluster"]["flows_appended"] == 0
    assert worker["cluster"]["flows_dropped_redis"] > 0 and worker["cluster"]["redis_connected"] == 0
    agent = next(iter(node.app.analysis.dropped_by_agent))
    assert node.app.analysis.dropped_by_agent == {agent: 500}
    # Redis comes up: the node connects again by itself and the next agent's flows get through.
    server.start()
    try:
        def delivered() -> int:  # an agent streams until the node is back (it waits out its backoff)
            sc.stream(stub, many_flows(1, 50))
            node.app.analysis.drain()
            return node.app.analysis.flows_appended
        assert wait_for(delivered, timeout=30, interval=0.5) == 50
        assert redis_totals(server.client(), PARTITIONS)["added"] == 50
    finally:
        server.stop()


def test_a_stalled_redis_never_holds_a_grpc_stream(ingest_node: Any, redis_server: RedisServer) -> None:
    """Redis stops answering (SIGSTOP) with the connection open: streams are still served in full while the
    sender waits out its socket timeout, and what it could not hand over is counted, not lost silently."""
    import os
    import signal

    node = ingest_node(redis_server.url, limits={"analysis_queue": 1000})
    stub = node.stub()
    assert sc.stream(stub, many_flows(0, 10)) == 10 and node.app.analysis.drain()
    assert wait_for(lambda: node.app.analysis.flows_appended == 10, timeout=10)
    assert redis_server.proc is not None
    os.kill(redis_server.proc.pid, signal.SIGSTOP)
    try:
        for agent in range(1, 5):  # served in full while Redis answers nothing
            assert sc.stream(stub, many_flows(agent, 400)) == 400
        status, metrics = node.rest.get("/api/v1/metrics")
        assert status == 200 and metrics["flows_created"] == 10 + 1600
        assert node.app.analysis.flows_appended == 10  # nothing reached Redis meanwhile
    finally:
        os.kill(redis_server.proc.pid, signal.SIGCONT)
    assert node.app.analysis.drain(60)
    sink = node.app.analysis
    # Whatever did not reach Redis is counted (the queue's overflow, the batch the timeout caught) ...
    totals = redis_totals(redis_server.client(), PARTITIONS)
    assert sink.flows_appended + sink.flows_dropped == 10 + 1600
    assert totals["added"] >= sink.flows_appended  # a batch resent after the timeout may be in twice: dedupe's job
    assert sink.flows_dropped > 0 and sum(sink.dropped_by_agent.values()) == sink.flows_dropped
