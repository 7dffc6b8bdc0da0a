"""A cluster of real processes on one machine (real redis-server, ingest, analyzers, manager).

The scenario corpus gives the same alerts as a standalone run; an analyzer killed with SIGKILL in the
middle of the load loses no flow and analyses none twice; a batch appended twice is analysed once.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from appliance.cluster import bus
from tests.appliance import wire
from tests.appliance.cluster.conftest import Cluster, RedisServer, pending, redis_totals
from tests.appliance.detection import scenarios as sc
from tests.appliance.detection.conftest import alerts_of, start_detecting
from tests.polling import wait_for

PARTITIONS = 8


def corpus() -> list[sc.Stream]:
    """The attack scenarios, one agent each (tests/appliance/detection/test_scenarios.py)."""
    return [sc.iodine_tunnel(), sc.dnscat2_tunnel(), sc.dga_malware(), sc.dns_flood(), sc.raw_ip_tls(),
            sc.icmp_tunnel(kind="ptunnel"), sc.http_exfiltration(), sc.http_covert(), sc.beaconing(), sc.volume_spike()]


def alert_keys(alerts: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return sorted((a["category"], a["agent_id"], a["indicator"]) for a in alerts)


def start_full(cluster: Cluster) -> tuple[list[Any], list[Any], Any]:
    """2 ingest nodes, 2 analyzers and a manager, started side by side."""
    options = {"partitions": PARTITIONS, "lease_seconds": 2, "checkpoint_seconds": 1}
    ingest = [cluster.start(f"ingest{i}", "ingest", wait=False, **options) for i in range(2)]
    analyzers = [cluster.start(f"analyzer{i}", "analyzer", wait=False, **options) for i in range(2)]
    manager = cluster.start("manager", "manager", wait=False, **options)
    for node in [*ingest, *analyzers, manager]:
        cluster.wait_ready(node)
    return ingest, analyzers, manager


def manager_caught_up(manager: Any, client: Any) -> bool:
    """The manager has saved every alert event the analyzers committed (none refused, none trimmed here)."""
    events = sum(client.xlen(bus.alerts_key(p)) for p in range(PARTITIONS))
    return bool(events) and manager.metrics()["analysis_worker"]["cluster"]["alerts_consumed"] == events


def settled(client: Any, partitions: int = PARTITIONS) -> dict[str, int]:
    """The counters once every appended flow is committed and nothing is pending ({} until then)."""
    totals = redis_totals(client, partitions)
    done = totals.get("added", 0) and totals.get("analysed", 0) + totals.get("trimmed", 0) == totals["added"]
    return totals if done and pending(client, partitions) == 0 else {}


@pytest.mark.slow
def test_a_cluster_raises_the_same_alerts_as_a_standalone_appliance(tmp_path: Path, cluster: Cluster,
                                                                   redis_server: RedisServer,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    streams = corpus()
    monkeypatch.delenv("SENSOR_ADMIN_TOKEN", raising=False)
    standalone = start_detecting(tmp_path / "standalone")
    try:
        for s in streams:
            sc.stream(standalone.stub(), s)
        expected = alert_keys(alerts_of(standalone))
    finally:
        standalone.app.stop()
    assert len(expected) == len(streams)  # one alert per scenario, as in the scenario tests

    ingest, analyzers, manager = start_full(cluster)
    client = redis_server.client()
    # Both analyzers hold a share before the load: the corpus is spread over them.
    assert wait_for(lambda: all(client.get(bus.lease_key(p)) for p in range(PARTITIONS))
                    and len({client.get(bus.lease_key(p)) for p in range(PARTITIONS)}) == 2, timeout=30)
    for i, s in enumerate(streams):  # agents spread over the two ingest nodes, as enrolled agents are
        assert sc.stream(ingest[i % 2].stub(), s) == len(s.packets)

    totals = wait_for(lambda: settled(client), timeout=60)
    assert totals, redis_totals(client, PARTITIONS)
    # The sender counts a batch once Redis has answered it, a moment after the counters moved: wait for it.
    appended = wait_for(lambda: sum(n.metrics()["analysis_worker"]["cluster"]["flows_appended"] for n in ingest)
                        == totals["added"])
    created = sum(node.metrics()["flows_created"] for node in ingest)
    assert appended and totals["added"] == created == totals["analysed"]
    assert totals.get("duplicates", 0) == 0 and totals.get("trimmed", 0) == 0
    assert all(totals.get(f"analysed:{a.node_id}", 0) > 0 for a in analyzers), totals  # both took part

    def manager_alerts() -> list[dict[str, Any]]:
        status, body = manager.rest.get("/api/v1/alerts?limit=1000")
        assert status == 200, body
        return body["alerts"]

    assert wait_for(lambda: manager_caught_up(manager, client), timeout=30)
    got = manager_alerts()
    assert alert_keys(got) == expected
    worker = manager.metrics()["analysis_worker"]
    assert worker["mode"] == "manager" and worker["cluster"]["alerts_refused"] == 0
    assert manager.metrics()["active_alerts"] == len(expected)
    # Triage on the manager holds when an analyzer updates the alert afterwards (upsert keeps the status).
    first = got[0]
    assert manager.rest.post(f"/api/v1/alerts/{first['id']}/status", {"status": "Investigating"})[0] == 200
    for node in [*ingest, *analyzers, manager]:
        assert node.stop() == 0, node.output()


def many_flows(agent: int, flows: int) -> sc.Stream:
    """One agent's `flows` one-packet UDP flows (distinct source ports), cheap to analyse."""
    s = sc.Stream(f"load-agent-{agent}", sc.agent_ip(200 + agent))
    for i in range(flows):
        s.add(wire.udp_out(s.ip, "198.51.100.7", 10_000 + i, 9999, b"x" * 32, sc.T0_MS + i))
    return s


def stop_holding_pending(node: Any, client: Any, timeout: float = 30) -> int:
    """SIGSTOP the analyzer at a moment it holds read, uncommitted entries; how many it holds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        os.kill(node.proc.pid, signal.SIGSTOP)
        held = pending(client, PARTITIONS, node.node_id)
        if held:
            return held
        os.kill(node.proc.pid, signal.SIGCONT)
        time.sleep(0.003)
    raise AssertionError("the analyzer never held pending entries")


@pytest.mark.slow
def test_an_analyzer_killed_mid_load_loses_no_flow_and_analyses_none_twice(cluster: Cluster,
                                                                          redis_server: RedisServer) -> None:
    options = {"partitions": PARTITIONS, "lease_seconds": 2, "checkpoint_seconds": 0.5}
    # A queue that holds the whole load: this test is about the analyzers (back-pressure has its own).
    ingest = cluster.start("ingest", "ingest", wait=False, sections={"limits": {"analysis_queue": 100_000}}, **options)
    victim = cluster.start("victim", "analyzer", wait=False, **options)
    survivor = cluster.start("survivor", "analyzer", wait=False, **options)
    for node in (ingest, victim, survivor):
        cluster.wait_ready(node)
    client = redis_server.client()
    assert wait_for(lambda: {client.get(bus.lease_key(p)) for p in range(PARTITIONS)}
                    == {b"victim-node", b"survivor-node"}, timeout=30)
    stub = ingest.stub()
    sent: list[int] = []
    killed = threading.Event()

    def load() -> None:
        # A stream of 1000 flows every 0.25 s until the victim is dead and two more begun after it: flows keep
        # arriving while it dies however long a loaded machine takes to get there (a fixed count could end first).
        # Counted by when a stream begins: a kill during the first stream's sleep still leaves two whole streams
        # after it (counted when they ended, that case sent only two in all). At most 40 agents:
        # sc.agent_ip(200 + agent) stays an address.
        after_kill = 0
        for agent in range(40):
            begun_after_kill = killed.is_set()
            sent.append(sc.stream(stub, many_flows(agent, 1000)))
            time.sleep(0.25)
            after_kill += begun_after_kill
            if after_kill == 2:
                return

    loader = threading.Thread(target=load)
    loader.start()
    try:
        held = _kill_mid_load(client, victim, loader, killed)
    finally:
        killed.set()  # ends the load early if the test failed before the kill
        loader.join(120)
    assert len(sent) >= 3 and sent == [1000] * len(sent)

    totals = wait_for(lambda: settled(client), timeout=90)
    assert totals, (redis_totals(client, PARTITIONS), pending(client, PARTITIONS))
    # The sender counts a batch once Redis has answered it, a moment after the counters moved: wait for it.
    metrics = wait_for(lambda: (m := ingest.metrics())["analysis_worker"]["cluster"]["flows_appended"] == totals["added"] and m)
    assert metrics["flows_created"] == sum(sent) == totals["added"] and metrics["analysis_queue_dropped"] == 0
    # Every flow analysed exactly once: the victim's commits and the survivor's add up to the flows added.
    assert totals["analysed"] == totals["added"]
    assert totals[f"analysed:{victim.node_id}"] + totals[f"analysed:{survivor.node_id}"] == totals["analysed"]
    assert totals[f"analysed:{victim.node_id}"] > 0 and totals[f"analysed:{survivor.node_id}"] > 0
    assert held > 0 and pending(client, PARTITIONS) == 0  # what the victim held was claimed and committed
    assert totals.get("duplicates", 0) == 0
    out = survivor.output()
    assert "took partition" in out and "baselines restored)" in out
    restored = [int(n) for n in re.findall(r"\((\d+) baselines restored\)", out)]
    assert any(restored), out  # the victim's checkpoints came back with its partitions

    # An ingest node's retry after a lost reply appends a batch twice: analysed once, counted as duplicates.
    p = next(p for p in range(PARTITIONS) if client.xlen(bus.flows_key(p)))
    entry_id, fields = client.xrange(bus.flows_key(p), count=1)[0]
    append = client.register_script(bus.APPEND)
    append(keys=[bus.flows_key(p), bus.counts_key(p)], args=[100_000, bus.GROUP, fields[b"k"], fields[b"d"], fields[b"n"]])
    copies = int(fields[b"n"])
    after = wait_for(lambda: redis_totals(client, PARTITIONS).get("duplicates", 0) == copies
                     and pending(client, PARTITIONS) == 0 and redis_totals(client, PARTITIONS), timeout=30)
    assert after and after["analysed"] == totals["analysed"] and after["added"] == totals["added"] + copies
    assert survivor.stop() == 0, survivor.output()


def _kill_mid_load(client: Any, victim: Any, loader: threading.Thread, killed: threading.Event) -> int:
    """SIGKILL the victim analyzer once it has analysed and checkpointed some of its agents' baselines, at a moment
    it holds read, uncommitted entries, while the load goes on; how many entries it held."""
    def victim_checkpointed() -> bool:
        mine = [p for p in range(PARTITIONS) if client.get(bus.lease_key(p)) == b"victim-node"]
        return (redis_totals(client, PARTITIONS).get(f"analysed:{victim.node_id}", 0) > 0
                and any(client.hlen(bus.checkpoint_key(p)) for p in mine))

    assert wait_for(victim_checkpointed, timeout=60)
    held = stop_holding_pending(victim, client)
    assert loader.is_alive()  # mid-load: flows keep arriving while the victim dies
    victim.proc.send_signal(signal.SIGKILL)
    victim.proc.wait(10)
    killed.set()
    return held


def stream_in_step(nodes: list[Any], streams: list[sc.Stream], client: Any, slice_ms: int = 60_000) -> None:
    """sc.stream_together over the cluster: one gRPC stream per agent, agents spread over the ingest nodes,
    event time advanced in step; each slice is ingested, appended and analysed before the next is sent."""
    import queue

    stubs = [nodes[i % len(nodes)].stub() for i in range(len(streams))]
    queues: list[queue.Queue[Any]] = [queue.Queue() for _ in streams]
    threads = [threading.Thread(target=lambda i=i: stubs[i].StreamPacketBatches(
        iter(queues[i].get, None), metadata=[("x-machine-id", streams[i].machine_id)]), daemon=True)
        for i in range(len(streams))]
    for thread in threads:
        thread.start()
    expected = [0] * len(nodes)

    def handed_over() -> bool:
        for node, packets in zip(nodes, expected):
            m = node.metrics()
            ended = m["flows_created"] - m["active_flows"]
            if m["packets_received"] < packets or m["analysis_worker"]["cluster"]["flows_appended"] < ended:
                return False
        return True

    for chunks in sc.time_slices(streams, slice_ms):
        for i, chunk in enumerate(chunks):
            for batch in sc.batches(chunk):
                queues[i].put(batch)
            expected[i % len(nodes)] += len(chunk)
        assert wait_for(handed_over, timeout=30, interval=0.01)
        totals = redis_totals(client, PARTITIONS)
        if totals.get("added"):
            assert wait_for(lambda: settled(client), timeout=30, interval=0.01)
    for q in queues:
        q.put(None)
    for thread in threads:
        thread.join(30)


@pytest.mark.slow
def test_shared_infrastructure_is_told_from_a_beacon_across_analyzers(tmp_path: Path, cluster: Cluster,
                                                                    redis_server: RedisServer,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Destination prevalence is shared: 6 of 8 office agents use a push service, spread over two analyzers
    that each see too few of them to call it shared; the cluster still tells it from the real beacon."""
    streams = [sc.benign_office(n, minutes=20) for n in range(8)] + [sc.beaconing()]
    monkeypatch.delenv("SENSOR_ADMIN_TOKEN", raising=False)
    standalone = start_detecting(tmp_path / "standalone")
    try:
        sc.stream_together(standalone, streams)
        expected = alert_keys(alerts_of(standalone))
    finally:
        standalone.app.stop()
    assert [(c, i) for c, _, i in expected] == [("Beaconing", sc.address_of("telemetry.beacon-example.com"))]

    ingest, analyzers, manager = start_full(cluster)
    client = redis_server.client()
    assert wait_for(lambda: len({client.get(bus.lease_key(p)) for p in range(PARTITIONS)} - {None}) == 2, timeout=30)
    stream_in_step(ingest, streams, client)
    for node in ingest:  # the streams' end flushes the last flows
        assert wait_for(lambda: (m := node.metrics())["active_flows"] == 0
                        and m["analysis_worker"]["cluster"]["flows_appended"] == m["flows_created"], timeout=30)
    assert wait_for(lambda: settled(client), timeout=30)
    totals = redis_totals(client, PARTITIONS)
    assert all(totals.get(f"analysed:{a.node_id}", 0) > 0 for a in analyzers), totals  # both took part
    assert wait_for(lambda: manager_caught_up(manager, client), timeout=30)
    assert alert_keys(manager.rest.get("/api/v1/alerts?limit=100")[1]["alerts"]) == expected
