"""The C fast path as a component: references, errors raised from Python callbacks, threads, memory.

What it computes is checked against the pure-Python reference in test_differential.py; these
tests cover what a C extension can get wrong that a Python one cannot.
"""

import gc
import sys
import threading
import tracemalloc
import weakref

import pytest

from appliance.flows import record_codec
from appliance.flows.record_codec import dns_message_of, expanded
from appliance.flows.tracker import FlowIds, FlowLimits, FlowTracker
from appliance.generated import sensor_pb2
from appliance.ingest.convert import PacketConverter
from appliance.model import FlowRecord
from appliance.native.fastpath import WireFlow
from tests.appliance import wire

BASE_MS = 1_700_000_000_000
NOW_NS = (BASE_MS + 10**9) * 1_000_000


def batch(count: int, start: int = 0, remote_base: int = 1) -> bytes:
    packets = [
        wire.packet(remote=f"10.{(remote_base + i) >> 16 & 255}.{(remote_base + i) >> 8 & 255}.{(remote_base + i) & 255}",
                    ts_ms=BASE_MS + start + i, payload=b"\x17\x03\x03" + bytes(40), pid=7, process="curl")
        for i in range(count)
    ]
    return sensor_pb2.PacketBatch(packets=packets).SerializeToString()


def dns_batch(count: int) -> bytes:
    packets = [
        wire.udp_in("10.0.0.5", "10.0.0.1", 40000 + i, 53,
                    wire.dns_response(f"h{i}.example.com", [(1, bytes([93, 184, 216, i & 255]))]), ts_ms=BASE_MS + i)
        for i in range(count)
    ]
    return sensor_pb2.PacketBatch(packets=packets).SerializeToString()


def test_a_tracker_and_its_records_are_freed_when_dropped():
    expired: list = []
    tracker = FlowTracker(expired.extend, reader=PacketConverter().wire)
    tracker.add_wire("a", batch(50), True, NOW_NS)
    wanted = tracker.snapshot(limit=1)[0].flow_id
    record = tracker._table.find(wanted)  # the live record itself (made by the table when first asked for)
    held_by_tracker = sys.getrefcount(record)
    tracker_ref = weakref.ref(tracker)
    del tracker
    gc.collect()  # the table holds bound methods of its tracker: a cycle only the collector can break
    assert tracker_ref() is None
    assert sys.getrefcount(record) == held_by_tracker - 1  # the table's reference was released


def test_an_error_in_a_callback_propagates_after_the_batch_and_the_tracker_stays_usable():
    calls = []

    def failing_resolver_cache(answers):
        calls.append([dns_message_of(message).qname for _, message in answers])
        raise RuntimeError("resolver cache broke")

    expired: list = []
    converter = PacketConverter()
    tracker = FlowTracker(expired.extend, on_dns_responses=failing_resolver_cache, reader=converter.wire)
    with pytest.raises(RuntimeError, match="resolver cache broke"):
        tracker.add_wire("a", dns_batch(3), True, NOW_NS)
    assert calls == [["h0.example.com", "h1.example.com", "h2.example.com"]]  # the batch's answers in one call...
    assert tracker.active_flows == 3  # ...which came after the batch: every packet was accounted
    tracker.add_wire("a", batch(2), True, NOW_NS)
    assert tracker.active_flows == 5
    tracker.flush_all()
    assert len(expired) == 5 and tracker.active_flows == 0


def test_find_by_id_gives_the_live_flow_with_current_counters_and_forgets_ended_ones():
    expired: list = []
    tracker = FlowTracker(expired.extend, reader=PacketConverter().wire)
    tracker.add_wire("a", batch(3), True, NOW_NS)
    records = tracker.snapshot(limit=10)
    for record in records:
        assert tracker.find(record.flow_id) == record  # an expanded copy: the table holds its samples as bytes
    packets_before = records[0].packets_out + records[0].packets_in
    tracker.add_wire("a", batch(3), True, NOW_NS)  # the same flows again
    found = tracker.find(records[0].flow_id)
    assert found is not None and found.packets_out + found.packets_in > packets_before
    tracker.flush_all()
    assert {r.flow_id for r in expired} == {r.flow_id for r in records}
    assert all(tracker.find(r.flow_id) is None for r in records) and tracker.find("nope") is None


def test_find_takes_only_the_canonical_spelling_of_a_live_flows_id():
    tracker = FlowTracker(lambda ended: None, flow_ids=FlowIds("0badc0de"), reader=PacketConverter().wire)
    tracker.add_wire("a", batch(3), True, NOW_NS)
    wanted = tracker.snapshot(limit=1)[0].flow_id
    assert wanted.startswith("0badc0de") and tracker.find(wanted) is not None
    counter = wanted[8:]
    for other in (wanted.upper(), "0badc0de0" + counter, "feedface" + counter, wanted[:-1], wanted + "0",
                  "0badc0de" + "g" * 12, "", "0badc0de", wanted + "\x00", "0badc0de" + "f" * 17, "é" * 20):
        assert tracker.find(other) is None, other
    with pytest.raises(TypeError):
        tracker._table.find(b"0badc0de000000000001")


def test_the_id_index_follows_the_table_as_it_grows_and_shrinks():
    expired: list = []
    tracker = FlowTracker(expired.extend, reader=PacketConverter().wire)
    for i in range(12):  # 3,072 flows: the table (and its id index) grows from 1,024 buckets twice
        tracker.add_wire("a", batch(256, start=i * 256, remote_base=i * 256), True, NOW_NS)
    live = tracker.snapshot(limit=10**6)
    assert len(live) == 3072 and all(tracker.find(r.flow_id) == r for r in live[::97])
    tracker.stream_opened("a")
    tracker.stream_closed("a")  # every flow ends
    assert len(expired) == 3072 and all(tracker.find(r.flow_id) is None for r in live[::97])


def _flow_records_alive() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is FlowRecord)


def test_a_flow_only_c_touches_has_no_python_object_until_it_is_listed_or_ends():
    expired: list = []
    tracker = FlowTracker(expired.extend, reader=PacketConverter().wire, ended_as_wire=True)
    before = _flow_records_alive()
    tracker.add_wire("a", batch(500), True, NOW_NS)
    assert tracker.active_flows == 500 and _flow_records_alive() == before
    listed = tracker.snapshot(limit=7)  # the table makes the records of the flows it lists...
    assert _flow_records_alive() >= before + 7
    tracker.flush_all()
    # ...which end as the records Python holds; the others end as WireFlows, their records encoded in C.
    held = [f for f in expired if isinstance(f, FlowRecord)]
    wire_flows = [f for f in expired if isinstance(f, WireFlow)]
    assert {f.flow_id for f in held} == {f.flow_id for f in listed} and len(wire_flows) == 493
    decoded = {r.flow_id: r for r in record_codec.decode(record_codec.encode(expired))}
    assert all(decoded[f.flow_id] == expanded(f) for f in held)
    assert all(decoded[f.flow_id].end_reason == "shutdown" and decoded[f.flow_id].packets_out == 1 for f in wire_flows)


def test_ended_flows_are_handed_over_even_when_the_resolver_cache_fails():
    def failing_resolver_cache(answers):
        raise RuntimeError("resolver cache broke")

    expired: list = []
    # One DNS message fills a DNS flow: each response's flow ends in the same call that delivers its answer.
    tracker = FlowTracker(expired.extend, limits=FlowLimits(dns_per_flow=1), on_dns_responses=failing_resolver_cache,
                          reader=PacketConverter().wire)
    with pytest.raises(RuntimeError, match="resolver cache broke"):
        tracker.add_wire("a", dns_batch(3), True, NOW_NS)
    assert len(expired) == 3 and tracker.active_flows == 0


def test_callbacks_run_without_the_tracker_lock_held():
    held = []
    tracker = FlowTracker(lambda flows: held.append(("expire", tracker.lock.locked())),
                          on_dns_responses=lambda answers: held.append(("dns", tracker.lock.locked())),
                          reader=PacketConverter().wire)
    tracker.add_wire("a", dns_batch(2), True, NOW_NS)
    tracker.flush_all()
    assert held and ("dns", False) in held and ("expire", False) in held
    assert all(locked is False for _, locked in held)


def test_records_hold_the_counters_of_their_flow_when_handed_over():
    expired: list = []
    tracker = FlowTracker(expired.extend, reader=PacketConverter().wire)
    data = sensor_pb2.PacketBatch(packets=[
        wire.packet(ts_ms=BASE_MS, size=60, payload=b"GET / HTTP/1.1\r\n", flags=0x02, pid=42, process="curl"),
        wire.packet(ts_ms=BASE_MS + 7, size=1500, payload=b"x" * 1400, direction=wire.INBOUND, flags=0x10),
    ]).SerializeToString()
    assert tracker.add_wire("a", data, True, NOW_NS) == (2, 0)
    tracker.flush_all()
    [flow] = expired
    assert (flow.packets_out, flow.packets_in, flow.bytes_out, flow.bytes_in) == (1, 1, 60, 1500)
    assert (flow.payload_bytes_out, flow.payload_bytes_in) == (16, 1400)
    assert (flow.pid, flow.process_name, flow.tcp_flags, flow.end_reason) == (42, "curl", 0x12, "shutdown")
    assert flow.last_ns - flow.first_ns == 7_000_000
    assert [p.payload[:3] for p in flow.samples] == [b"GET", b"xxx"]


def test_streams_of_several_threads_are_counted_exactly():
    expired: list = []
    converter = PacketConverter()
    # The converter that reads elsewhere is the one whose reader the tracker was built with.
    tracker = FlowTracker(expired.extend, limits=FlowLimits(max_flows=500), reader=converter.wire)
    data = batch(200)
    garbage = b"\x0a\xff\xff"  # a packet whose length runs past the end

    def stream(agent: str) -> None:
        for _ in range(30):
            tracker.add_wire(agent, data, True, NOW_NS)
            tracker.add_wire(agent, garbage, True, NOW_NS)
            converter.read([wire.packet(process="other")], NOW_NS)  # the reader's name cache changes under it

    threads = [threading.Thread(target=stream, args=(f"agent-{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    tracker.flush_all()
    assert converter.rejected == {"malformed_message": 4 * 30}
    flows = tracker.flows_created
    assert len(expired) == flows and tracker.flows_expired + tracker.flows_evicted == flows
    assert sum(f.packets_out for f in expired) == 4 * 30 * 200


@pytest.mark.parametrize("ended_as_wire", [False, True])
def test_steady_ingestion_does_not_leak(ended_as_wire: bool):
    tracker = FlowTracker(lambda ended: None, reader=PacketConverter().wire, ended_as_wire=ended_as_wire)
    batches = [batch(256, start=i * 256, remote_base=i * 256) for i in range(20)]

    def round_() -> None:
        for data in batches:
            tracker.add_wire("a", data, True, NOW_NS)
        tracker.add_wire("a", dns_batch(50), True, NOW_NS)
        tracker.flush_all()

    round_()  # caches and free lists settle
    gc.collect()
    tracemalloc.start()
    try:
        round_()
        gc.collect()
        after_one, _ = tracemalloc.get_traced_memory()
        for _ in range(10):
            round_()
        gc.collect()
        after_eleven, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Ten more rounds of 5,170 packets each: a reference leaked per packet would hold megabytes.
    assert after_eleven - after_one < 64 * 1024


def test_hostile_wire_bytes_never_raise():
    converter = PacketConverter()
    tracker = FlowTracker(lambda ended: None, reader=converter.wire)
    good = batch(3)
    hostile = [
        b"", b"\x00", b"\x08", b"\xff" * 64, b"\x0a\x80\x80\x80\x80\x10", good[:-1], good + b"\x0b",
        b"\x0a\x05" + bytes([0xa3, 0x01]) * 3,  # a group that never ends, inside a packet
        bytes([0x0b]) * 200 + bytes([0x0c]) * 200,  # groups nested past the limit
    ]
    for data in hostile:
        for batched in (True, False):
            converter.read_wire(data, batched, NOW_NS)
            tracker.add_wire("a", data, batched, NOW_NS)
    assert converter.rejected.get("malformed_message", 0) > 0
    assert len(converter.read_wire(good, True, NOW_NS)) == 3


def test_clocks_at_the_edge_of_64_bits_saturate_instead_of_overflowing():
    converter = PacketConverter()
    # A server clock in the year 2262: the future horizon saturates, the agent's timestamp is kept.
    [raw] = converter.read([wire.packet(ts_ms=BASE_MS)], 2**63 - 1)
    assert raw[0] == BASE_MS * 1_000_000 and converter.repaired == {}
    expired: list = []
    tracker = FlowTracker(expired.extend)
    tracker.add_packets("a", [raw])
    tracker.sweep(1e300)  # an absurd wall clock: the event clock saturates and the flow idles out
    assert [f.end_reason for f in expired] == ["idle"]


def _tcp_batch(remotes: list[int], ts_ms: int) -> bytes:
    """One packet (no payload: nothing kept) to each remote address, all at ts_ms."""
    return sensor_pb2.PacketBatch(packets=[
        sensor_pb2.NetworkPacket(local_ip=0x0A000005, remote_ip=0x5D000000 + r, local_port=40000, remote_port=443,
                                 protocol=6, timestamp=ts_ms, direction=1, size=60, tcp_flags=0x10)
        for r in remotes
    ]).SerializeToString()


def test_a_snapshot_of_a_large_table_looks_at_the_list_tails_and_its_limit_only():
    tracker = FlowTracker(lambda ended: None, reader=PacketConverter().wire)
    agents, per_agent = ["a", "b", "c"], 20_000
    for start in range(0, per_agent, 2000):
        for agent in agents:
            tracker.add_wire(agent, _tcp_batch(list(range(start, start + 2000)), BASE_MS), True, NOW_NS)
    touched = [("b", 17), ("a", 5), ("c", 19_999), ("a", 12_345), ("b", 0)]  # oldest flows, updated last
    for agent, remote in touched:
        tracker.add_wire(agent, _tcp_batch([remote], BASE_MS + 1), True, NOW_NS)
    assert tracker.active_flows == len(agents) * per_agent

    newest = tracker.snapshot(limit=5)
    assert [(f.agent_id, f.remote_ip - 0x5D000000) for f in newest] == touched[::-1]
    # Three agents, one non-empty list each (TCP): 3 tails, then one step per flow taken. The old
    # snapshot sorted all 60,000.
    assert tracker.snapshot_visited() <= 3 + 5
    [b_newest, b_next] = tracker.snapshot("b", 2)
    assert (b_newest.remote_ip, b_next.remote_ip) == (0x5D000000 + 0, 0x5D000000 + 17)
    assert tracker.snapshot_visited() <= 1 + 2
    everything = tracker.snapshot(limit=2**62)  # a limit past the table: every flow once, nothing more
    assert len(everything) == len({f.flow_id for f in everything}) == len(agents) * per_agent
    assert tracker.snapshot_visited() == len(agents) * per_agent


def test_a_tracker_parses_with_the_reader_it_was_built_with_and_refuses_wire_bytes_without_one():
    converter = PacketConverter()
    tracker = FlowTracker(lambda ended: None, reader=converter.wire)
    del converter  # the tracker holds its reader
    assert tracker.add_wire("a", batch(2) + b"\x0b", True, NOW_NS) == (2, 1)

    packets_only = FlowTracker(lambda ended: None)
    with pytest.raises(TypeError, match="without a reader"):
        packets_only.add_wire("a", batch(2), True, NOW_NS)
    assert packets_only.active_flows == 0 and not packets_only.lock.locked()
    packets_only.add_packets("a", PacketConverter().read_wire(batch(2), True, NOW_NS))
    assert packets_only.active_flows == 2
    with pytest.raises(TypeError, match="WireReader"):
        FlowTracker(lambda ended: None, reader=PacketConverter())  # type: ignore[arg-type]
