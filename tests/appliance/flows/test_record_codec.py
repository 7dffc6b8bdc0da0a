"""The flow record contract (proto/flow_record.proto): what leaves the flow table comes back equal."""

from __future__ import annotations

import dataclasses
import random

import pytest

from appliance.flows import record_codec
from appliance.generated import flow_record_pb2 as pb
from appliance.flows.tracker import FlowTracker
from appliance.ingest.convert import PacketConverter
from appliance.model import DnsAnswer, DnsMessage, FlowRecord
from appliance.native.fastpath import WireFlow, encode_dns_batch
from tests.appliance.detection import scenarios as sc


def flows_of(*streams: sc.Stream) -> list[FlowRecord]:
    """Real flow records: the scenarios' packets through the converter and the flow table, then flushed."""
    finished: list[FlowRecord] = []
    tracker = FlowTracker(finished.extend)
    converter = PacketConverter()
    for stream in streams:
        for batch in sc.batches(stream.sorted()):
            tracker.add_packets(stream.machine_id, converter.read(batch.packets))
    tracker.flush_all()
    return finished


def test_real_flows_survive_the_round_trip_field_for_field() -> None:
    flows = flows_of(sc.iodine_tunnel(seconds=20), sc.benign_office(1, minutes=3), sc.icmp_tunnel(), sc.raw_ip_tls())
    assert {f.protocol for f in flows} >= {1, 6, 17} and any(f.dns for f in flows) and any(f.samples for f in flows)
    back = record_codec.decode(record_codec.encode(flows))
    assert back == flows
    # A sample's DNS message is the flow's own message object again, not a copy (the DNS layer relies on it).
    for flow in back:
        for sample in flow.samples:
            if sample.dns is not None:
                assert any(sample.dns is m for m in flow.dns)


def test_dns_batches_keep_agent_message_and_origin() -> None:
    message = DnsMessage(7, True, 0, "www.example.com", 1, 1, [DnsAnswer("www.example.com", 1, 60, "93.184.216.34")],
                         False, 123)
    items = [("agent-a", message, False), ("agent-b", message, True)]
    assert record_codec.decode_dns(record_codec.encode_dns(items)) == items

    # The C table's answers arrive serialized: they go into the batch as they are, and read back the same.
    serialized = record_codec._dns_pb(message).SerializeToString()
    mixed = [("agent-a", serialized, False), ("agent-b", message, True)]
    assert record_codec.encode_dns(mixed) == record_codec.encode_dns(items)
    assert record_codec.dns_message_of(serialized) == message and record_codec.dns_message_of(message) is message


def test_dns_batches_are_the_bytes_protobuf_writes() -> None:
    """encode_dns frames items by hand: held equal, byte for byte, to the generated classes' batch."""
    rng = random.Random(1124)
    agents = ["", "a", "agent-\u00e9\u4e2d", "x" * 200, "y" * 20_000]
    items: list[tuple[str, record_codec.AnyDns, bool]] = []
    for n in range(400):
        answers = [DnsAnswer(f"n{i}.example", rng.choice((1, 5, 16, 28)), rng.randrange(2**32), "d" * rng.randrange(300))
                   for i in range(rng.randrange(4))]
        message = DnsMessage(rng.randrange(65536), rng.random() < 0.5, rng.randrange(16),
                             "q" * rng.randrange(0, 300) + ".example", rng.randrange(65536), 1, answers,
                             rng.random() < 0.1, rng.randrange(2**64))
        if n % 50 == 0:
            message = DnsMessage(0, False, 0, "", 0, 0, [], False, 0)  # every field at its default
        wire = message if rng.random() < 0.5 else record_codec._dns_pb(message).SerializeToString()
        items.append((rng.choice(agents), wire, rng.random() < 0.5))
    reference = pb.DnsBatch()
    for agent_id, message, from_event in items:
        reference.items.add(agent_id=agent_id, from_event=from_event,
                            message=pb.DnsMessage.FromString(message) if type(message) is bytes else record_codec._dns_pb(message))
    assert record_codec.encode_dns(items) == reference.SerializeToString()
    assert record_codec.encode_dns([]) == b""
    decoded = record_codec.decode_dns(record_codec.encode_dns(items))
    assert [(a, e) for a, _, e in decoded] == [(a, e) for a, _, e in items]
    assert [m for _, m, _ in decoded] == [record_codec.dns_message_of(m) for _, m, _ in items]


@pytest.mark.parametrize("data", [b"\xff" * 10, b"\x0a\xff\xff\xff\xff\x0f", b"\x08\x02"])
def test_bytes_that_are_not_a_batch_of_this_version_are_refused(data: bytes) -> None:
    with pytest.raises(record_codec.RecordError):
        record_codec.decode(data)


def test_an_empty_batch_is_no_flows() -> None:
    assert record_codec.decode(record_codec.encode([])) == []


def test_records_the_flow_table_wrote_in_c_decode_to_the_records_python_would_have_made() -> None:
    """The C table writes the samples of TCP, ICMP and non-DNS UDP flows, and whole records of flows Python never
    held, straight into this contract; the analysis process must read the same records and Packets the in-process
    path makes (counters, ids, end reasons, payload cut, names, flags, ICMP's type, code and data and all), in the
    order they ended."""
    streams = (sc.benign_office(2, minutes=3), sc.raw_ip_tls(), sc.http_exfiltration(), sc.icmp_tunnel(),
               sc.icmp_tunnel(kind="icmpsh"))
    as_wire: list[record_codec.EndedFlow] = []
    tracker = FlowTracker(as_wire.extend, ended_as_wire=True)
    converter = PacketConverter()
    for n, stream in enumerate(streams):
        for batch in sc.batches(stream.sorted()):
            tracker.add_packets(stream.machine_id, converter.read(batch.packets))
            if n == 0 and not tracker.snapshot_visited():
                tracker.snapshot()  # the flows live now are held by Python from here on: they end as FlowRecords
    tracker.flush_all()
    expanded = flows_of(*streams)
    wire_flows = [f for f in as_wire if isinstance(f, WireFlow)]
    held = [f for f in as_wire if isinstance(f, FlowRecord)]
    assert wire_flows and held and not any(f.kept_wire for f in expanded)
    icmp = [r for r in map(record_codec.record_of, wire_flows) if r.protocol == 1]
    assert icmp and all(p.icmp is not None for r in icmp for p in record_codec.expanded(r).samples)
    assert all(f.entry and f.flow_id and f.agent_id and f.last_ns for f in wire_flows)
    assert record_codec.decode(record_codec.encode(as_wire)) == expanded  # mixed runs keep their order
    only_wire = record_codec.encode(wire_flows)  # joined in one call
    assert only_wire == b"".join([record_codec._VERSION_FIELD, *(f.entry for f in wire_flows)])
    assert record_codec.decode(only_wire) == [e for f, e in zip(as_wire, expanded) if isinstance(f, WireFlow)]
    assert [record_codec.expanded(record_codec.record_of(f)) for f in as_wire] == expanded
    assert [(f.flow_id, f.agent_id, f.last_ns) for f in wire_flows] == [
        (r.flow_id, r.agent_id, r.last_ns) for r in map(record_codec.record_of, wire_flows)]
    assert [record_codec.expanded(record_codec.record_of(f)).samples for f in as_wire] == [f.samples for f in expanded]
    # One entry per record, in order (what the analysis process's outbox keeps per agent): joined, the same batch.
    entries = record_codec.entries(as_wire)
    assert len(entries) == len(as_wire)
    assert b"".join([record_codec._VERSION_FIELD, *entries]) == record_codec.encode(as_wire)
    assert [record_codec.decode(record_codec._VERSION_FIELD + e) for e in entries] == [[f] for f in expanded]


@pytest.mark.parametrize("items", [[("a", "not bytes", False)], [(1, b"", False)], [("a", b"")], ["item"],
                                   [("a", b"", False), ("\ud800", b"", False)]])
def test_dns_batch_items_of_the_wrong_shape_are_refused(items) -> None:
    with pytest.raises((TypeError, UnicodeEncodeError)):
        encode_dns_batch(items)


def test_a_sample_mask_leaves_only_the_other_protocols_samples_out() -> None:
    flows = flows_of(sc.iodine_tunnel(seconds=20), sc.benign_office(1, minutes=3), sc.icmp_tunnel())
    data = record_codec.encode(flows)
    masked = record_codec.decode(data, record_codec.sample_mask({1, 6}))
    assert [dataclasses.replace(f, samples=[]) if f.protocol not in (1, 6) else f for f in flows] == masked
    assert any(f.protocol == 17 and f.samples for f in flows)
    with pytest.raises(TypeError, match="256 bytes"):
        record_codec.decode(data, b"\x01" * 255)
