"""SampleList (appliance/native/sample_list.h): a decoded flow's payload samples, kept as C entries and made into
Packet objects only when Python asks. It must stand for the list upb reads in every way Python can see, and
dpi.sample_facts, which reads its entries in place, must read what it reads from the packets. test_sanitized.py
runs this file against an ASan/UBSan build."""

from __future__ import annotations

import copy
import gc
import pickle

import pytest

from appliance.detection.facts import FlowFacts, facts_reference
from appliance.flows import record_codec
from appliance.model import DnsMessage, FlowRecord, IcmpInfo, Packet, Transport
from appliance.native.fastpath import SampleList


def decoded(flows: list[FlowRecord]) -> list[FlowRecord]:
    """`flows` as the analysis process reads them: through the flow record contract, samples in SampleLists."""
    data = record_codec.encode(flows)
    assert record_codec.decode(data) == flows  # a second reading is compared: comparing makes every packet
    made = record_codec.decode(data)
    assert all(type(flow.samples) is SampleList and flow.samples.made == 0 for flow in made if flow.samples)
    return made


def _packet(direction: int, payload: bytes, ts: int = 10**9, protocol: int = 6, dns: DnsMessage | None = None) -> Packet:
    transport = Transport.TCP if protocol == 6 else Transport.UDP if protocol == 17 else Transport.ICMP
    icmp = IcmpInfo(payload[0], payload[1], payload[4:]) if protocol == 1 and len(payload) >= 4 else None
    return Packet(ts, direction, protocol, transport, 1, 2, 40000, 443, len(payload) + 40, payload, 0x18, 77,
                  "curl", dns, icmp)


def _flow(samples: list[Packet], protocol: int = 6, dns: list[DnsMessage] | None = None, flow_id: str = "f") -> FlowRecord:
    transport = Transport.TCP if protocol == 6 else Transport.UDP if protocol == 17 else Transport.ICMP
    return FlowRecord(flow_id, "a", protocol, transport, 1, 40000, 2, 443, 10**9, 2 * 10**9, packets_out=len(samples),
                      dns=dns or [], samples=samples)


def _samples() -> list[Packet]:
    return [_packet(1, b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"), _packet(2, b"HTTP/1.1 200 OK\r\n\r\n", 2 * 10**9),
            _packet(1, b""), _packet(7, b"\x16\x03\x01odd direction"), _packet(2, bytes(range(256)) * 4)]


def test_a_decoded_flows_samples_stand_for_the_list_they_were() -> None:
    packets = _samples()
    (flow,) = decoded([_flow(packets)])
    samples = flow.samples
    assert len(samples) == 5 and bool(samples) and samples.made == 0
    assert samples == packets and not (samples != packets) and packets == samples and samples.made == 5
    assert [type(p) for p in samples] == [Packet] * 5
    assert samples[0] is samples[0] and list(samples)[2] is samples[2]  # made once, then kept
    assert repr(samples) == repr(packets)
    assert samples + [] == packets and type(samples + []) is list
    assert copy.deepcopy(samples) == packets and type(copy.deepcopy(samples)) is list
    assert pickle.loads(pickle.dumps(samples)) == packets
    assert samples != tuple(packets) and samples != packets[:4]
    with pytest.raises(IndexError):
        samples[5]
    with pytest.raises(TypeError):
        hash(samples)
    with pytest.raises(TypeError):
        samples[0] = packets[0]  # type: ignore[index]
    (empty,) = record_codec.decode(record_codec.encode([_flow([])]))
    assert empty.samples == [] and type(empty.samples) is list  # no samples: a plain empty list, as before


def test_icmp_samples_and_dns_links_are_made_as_the_decoder_made_them() -> None:
    """A sample links to one of its flow's DNS messages: the packet made later holds the very DnsList message."""
    query = DnsMessage(7, False, 0, "a.example.com", 1, 1, timestamp_ns=10**9)
    dns_flow = _flow([_packet(1, b"\x00\x07query", protocol=17, dns=query), _packet(2, b"\x00\x07reply", protocol=17)],
                     protocol=17, dns=[query], flow_id="d")
    icmp_flow = _flow([_packet(1, b"\x08\x00\x01\x02ping", protocol=1), _packet(2, b"\x00", protocol=1)], protocol=1,
                      flow_id="i")
    got_dns, got_icmp = decoded([dns_flow, icmp_flow])
    assert got_dns.samples[0].dns is got_dns.dns[0] and got_dns.samples[1].dns is None
    assert got_icmp.samples[0].icmp == IcmpInfo(8, 0, b"ping") and got_icmp.samples[1].icmp is None
    assert got_dns == dns_flow and got_icmp == icmp_flow


def test_sample_facts_reads_the_entries_without_making_packets() -> None:
    """What the SampleList is for: the facts of a decoded flow, read in place, equal the reference's of the list,
    and no Packet is made."""
    packets = _samples() + [_packet(1, b"\x16\x03\x01\x00\x05\x01\x00\x00\x01\x03")]  # a hello cut short
    (flow,) = decoded([_flow(packets)])
    reader = FlowFacts(tls_views=False)
    facts = reader.facts(flow)
    assert flow.samples.made == 0
    expected, handshake = facts_reference(_flow(packets))
    assert facts.http_requests == expected.http_requests and [r.uri for r in facts.http_requests] == ["/"]
    assert facts.http_responses == expected.http_responses and [r.status for r in facts.http_responses] == [200]
    assert facts.tls is None and expected.tls is None and handshake and reader.tls_unreadable == 1


def test_lists_made_and_dropped_leave_no_objects_behind() -> None:
    flows = [_flow(_samples(), flow_id=f"f{i}") for i in range(20)]
    data = record_codec.encode(flows)
    for _ in range(3):  # warm
        [list(f.samples) for f in record_codec.decode(data)]
    gc.collect()
    before = len(gc.get_objects())
    for _ in range(50):
        [list(f.samples) for f in record_codec.decode(data)]
        [f.samples[0] for f in record_codec.decode(data)]
        [FlowFacts(tls_views=False).facts(f) for f in record_codec.decode(data)]
    gc.collect()
    assert len(gc.get_objects()) - before < 50


def test_a_cycle_through_a_made_packet_is_collected_and_the_list_still_reads() -> None:
    """A caller may store the list in one of its packets: the collector sees the made packets and frees the cycle.
    Making every packet (a copy) keeps the ones made before."""
    def alive() -> int:
        return sum(type(o) is SampleList for o in gc.get_objects())

    gc.collect()
    before = alive()
    (flow,) = decoded([_flow(_samples())])
    samples = flow.samples
    samples[1].process_name = samples  # type: ignore[assignment]
    del flow, samples
    assert alive() == before + 1  # held by its own packet: only the collector can free it
    gc.collect()
    assert alive() == before  # the cycle was found and freed
    (again,) = decoded([_flow(_samples())])
    packet = again.samples[1]
    again.samples.__reduce__()  # makes every packet
    assert again.samples[1] is packet and again.samples == _samples()
