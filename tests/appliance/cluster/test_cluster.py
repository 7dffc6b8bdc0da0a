"""A cluster of real processes on one machine (real redis-server, ingest, analyzers, manager).

The scenario corpus gives the same alerts as a standalone run; an analyzer killed with SIGKILL in the
middle of the load loses no flow and analyses none twice; a batch appended twice is analysed once.
"""

from __future__ import annotations

import os
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

    options = {"partitions": PARTITIONS, "lease_seconds": 2, "checkpoint_seconds": 1}
    ingest = [cluster.start(f"ingest{i}", "ingest", wait=False, **options) for i in range(2)]
    analyzers = [cluster.start(f"analyzer{i}", "analyzer", wait=False, **options) for i in range(2)]
    manager = cluster.start("manager", "manager", wait=False, **options)
    for node in [*ingest, *analyzers, manager]:
        cluster.wait_ready(node)
    client = redis_server.client()
    # Both analyzers hold a share before the load: the corpus is spread over them.
    wait_for(lambda: all(client.get(bus.lease_key(p)) for p in range(PARTITIONS))
             and len({client.get(bus.lease_key(p)) for p in range(PARTITIONS)}) == 2, timeout=30)
    for i, s in enumerate(streams):  # agents spread over the two ingest nodes, as enrolled agents are
        assert sc.stream(ingest[i % 2].stub(), s) == len(s.packets)

    totals = wait_for(lambda: settled(client), timeout=60)
    assert totals, redis_totals(client, PARTITIONS)
    created = sum(node.metrics()["flows_created"] for node in ingest)
    appended = sum(node.metrics()["analysis_worker"]["cluster"]["flows_appended"] for node in ingest)
    assert totals["added"] == appended == created == totals["analysed"]
    assert totals.get("duplicates", 0) == 0 and totals.get("trimmed", 0) == 0
    assert all(totals.get(f"analysed:{a.node_id}", 0) > 0 for a in analyzers), totals  # both took part

    def manager_alerts() -> list[dict[str, Any]]:
        status, body = manager.rest.get("/api/v1/alerts?limit=1000")
        assert status == 200, body
        return body["alerts"]

    got = wait_for(lambda: len(manager_alerts()) >= len(expected) and manager_alerts(), timeout=30)
    assert alert_keys(got) == expected
    worker = manager.metrics()["analysis_worker"]
    assert worker["mode"] == "manager" and worker["cluster"]["alerts_refused"] == 0
    assert manager.metrics()["active_alerts"] == len(expected)
    # Triage on the manager holds when an analyzer updates the alert afterwards (upsert keeps the status).
    first = got[0]
    assert manager.rest.post(f"/api/v1/alerts/{first['id']}/status", {"status": "Investigating"})[0] == 200
    for node in [*ingest, *analyzers, manager]:
        assert node.stop() == 0, node.output()
