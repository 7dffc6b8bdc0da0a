"""Every flow record has its own id; the 5-tuple hash is its `community_id` (issue: one id listed twice)."""

from __future__ import annotations

import re

from appliance.flows.tracker import PROCESS_PREFIX, FlowIds, FlowTimeouts, FlowTracker
from appliance.generated import sensor_pb2
from appliance.ingest.convert import PacketConverter
from tests.appliance import wire
from tests.conftest import RunningAppliance
from tests.polling import wait_for

BASE_MS = 1_700_000_000_000


def test_records_of_one_conversation_cut_by_the_active_timeout_have_their_own_ids():
    expired = []
    tracker = FlowTracker(expired.extend, FlowTimeouts(active=10, tcp_idle=300))
    converter = PacketConverter()
    for second in range(0, 25, 1):  # one TCP conversation, 25 s long: cut at 10 s and 20 s
        packets = converter.read([wire.packet(ts_ms=BASE_MS + second * 1000, size=60)], (BASE_MS + 10**9) * 10**6)
        tracker.add_packets("agent-1", packets)
    tracker.flush_all("shutdown")
    assert [f.end_reason for f in expired] == ["active", "active", "shutdown"]
    ids = [f.flow_id for f in expired]
    assert len(set(ids)) == 3
    assert all(re.fullmatch(r"[0-9a-f]{20}", i) for i in ids)
    assert {(f.local_port, f.remote_port) for f in expired} == {(40000, 443)}


def test_ids_are_unique_across_processes_by_their_random_prefix():
    assert re.fullmatch(r"[0-9a-f]{8}", PROCESS_PREFIX)
    ids = FlowIds()
    first, second = ids(), ids()
    assert first != second and first.startswith(PROCESS_PREFIX) and second.startswith(PROCESS_PREFIX)
    # Another run draws another prefix: the same counter value yields another id.
    assert FlowIds("0badc0de")() != FlowIds("feedface")()


def _stream(appliance: RunningAppliance, lport: int) -> None:
    """One stream whose end flushes its flow (end_reason stream_end)."""
    stub = appliance.stub()
    stub.StreamPacketBatches(iter([sensor_pb2.PacketBatch(packets=[wire.packet(lport=lport, size=80)])]),
                             metadata=[("x-machine-id", "flow-ids-machine")], timeout=10)


def test_the_same_conversation_twice_lists_two_ids_and_each_is_found(appliance: RunningAppliance):
    _stream(appliance, 41000)
    _stream(appliance, 41000)  # the same 5-tuple again, as a replayed capture does

    def finished() -> list:
        body = appliance.rest.get("/api/v1/flows?state=finished")[1]
        return body["flows"] if body["count"] == 2 else []

    flows = wait_for(finished)
    assert len(flows) == 2, appliance.rest.get("/api/v1/flows")[1]
    first, second = flows
    assert first["id"] != second["id"]
    assert first["community_id"] == second["community_id"]  # the 5-tuple hash, for pivoting
    assert first["community_id"].startswith("1:")
    for flow in flows:
        status, one = appliance.rest.get(f"/api/v1/flows/{flow['id']}")
        assert status == 200 and one == flow
