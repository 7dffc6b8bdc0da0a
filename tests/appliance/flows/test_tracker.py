from appliance.flows.record_codec import dns_message_of
from appliance.flows.tracker import FlowLimits, FlowTimeouts, FlowTracker, community_id
from appliance.ingest.convert import PacketConverter
from appliance.model import TCP_ACK, TCP_FIN, TCP_RST, TCP_SYN, ip_int
from tests.appliance import wire

BASE_MS = 1_700_000_000_000  # event time in the past: the tracker must not care about the wall clock
AGENT = "agent-1"


def make(limits=None, timeouts=None):
    expired = []
    tracker = FlowTracker(expired.extend, timeouts or FlowTimeouts(), limits or FlowLimits())
    return tracker, expired


def pkts(*pbs):
    conv = PacketConverter()
    return conv.read(pbs, (BASE_MS + 10**9) * 1_000_000)


def test_community_id_is_the_same_in_both_directions():
    a, b = ip_int("10.0.0.5"), ip_int("93.184.216.34")
    assert community_id(6, a, 40000, b, 443) == community_id(6, b, 443, a, 40000)
    assert community_id(6, a, 40000, b, 443) != community_id(6, a, 40001, b, 443)


def test_community_id_matches_the_published_test_vector():
    # Community ID spec baseline: tcp 128.232.110.120:34855 -> 66.35.250.204:80
    cid = community_id(6, ip_int("128.232.110.120"), 34855, ip_int("66.35.250.204"), 80)
    assert cid == "1:LQU9qZlK+B5F3KDmev6m5PMibrg="


def test_both_directions_aggregate_into_one_flow_with_counters():
    tracker, _ = make()
    tracker.add_packets(AGENT, pkts(
        wire.packet(ts_ms=BASE_MS, size=60, payload=b"abc", flags=TCP_SYN),
        wire.packet(ts_ms=BASE_MS + 5, size=1500, payload=b"x" * 100, direction=wire.INBOUND, flags=TCP_ACK),
        wire.packet(ts_ms=BASE_MS + 9, size=52, direction=wire.OUTBOUND, flags=TCP_ACK),
    ))
    [flow] = tracker.snapshot()
    assert (flow.packets_out, flow.packets_in, flow.bytes_out, flow.bytes_in) == (2, 1, 112, 1500)
    assert flow.payload_bytes_out == 3 and flow.payload_bytes_in == 100
    assert flow.tcp_flags == TCP_SYN | TCP_ACK
    assert flow.last_ns - flow.first_ns == 9_000_000
    assert len(flow.samples) == 2


def test_idle_flows_expire_on_event_time_not_wall_clock():
    tracker, expired = make(timeouts=FlowTimeouts(udp_idle=30))
    tracker.add_packets(AGENT, pkts(wire.udp_out("10.0.0.5", "1.1.1.1", 4000, 9999, b"a", ts_ms=BASE_MS)))
    tracker.add_packets(AGENT, pkts(wire.udp_out("10.0.0.5", "1.1.1.2", 4000, 9999, b"b", ts_ms=BASE_MS + 29_000)))
    assert expired == []  # wall clock is years past these timestamps; only event time counts
    tracker.add_packets(AGENT, pkts(wire.udp_out("10.0.0.5", "1.1.1.3", 4000, 9999, b"c", ts_ms=BASE_MS + 31_000)))
    assert [f.remote_addr for f in expired] == ["1.1.1.1"]
    assert expired[0].end_reason == "idle"


def test_each_agent_has_its_own_event_clock():
    tracker, expired = make(timeouts=FlowTimeouts(udp_idle=30))
    tracker.add_packets("a", pkts(wire.udp_out("10.0.0.5", "1.1.1.1", 4000, 9999, b"a", ts_ms=BASE_MS)))
    tracker.add_packets("b", pkts(wire.udp_out("10.0.0.6", "1.1.1.1", 4000, 9999, b"a", ts_ms=BASE_MS + 3_600_000)))
    assert expired == []


def test_tcp_close_ends_the_flow_after_fin_in_both_directions():
    tracker, expired = make()
    tracker.add_packets(AGENT, pkts(wire.packet(ts_ms=BASE_MS, flags=TCP_SYN), wire.packet(ts_ms=BASE_MS + 1, flags=TCP_FIN | TCP_ACK)))
    assert expired == []
    tracker.add_packets(AGENT, pkts(wire.packet(ts_ms=BASE_MS + 2, flags=TCP_FIN | TCP_ACK, direction=wire.INBOUND)))
    assert [f.end_reason for f in expired] == ["tcp_close"]
    assert tracker.active_flows == 0


def test_rst_ends_the_flow_at_once():
    tracker, expired = make()
    tracker.add_packets(AGENT, pkts(wire.packet(ts_ms=BASE_MS, flags=TCP_SYN), wire.packet(ts_ms=BASE_MS + 1, flags=TCP_RST, direction=wire.INBOUND)))
    assert [f.end_reason for f in expired] == ["tcp_close"]
    assert expired[0].packets_in == 1


def test_active_timeout_cuts_long_flows():
    tracker, expired = make(timeouts=FlowTimeouts(active=60))
    tracker.add_packets(AGENT, pkts(*[wire.packet(ts_ms=BASE_MS + i * 10_000) for i in range(8)]))
    assert expired and expired[0].end_reason == "active"
    assert expired[0].packets_out == 7  # 0..60 s


def test_flow_cap_evicts_the_longest_idle_flow_and_counts_it():
    tracker, expired = make(limits=FlowLimits(max_flows=3))
    for i in range(3):
        tracker.add_packets(AGENT, pkts(wire.packet(ts_ms=BASE_MS + i, remote=f"1.1.1.{i + 1}")))
    tracker.add_packets(AGENT, pkts(wire.packet(ts_ms=BASE_MS + 1, remote="1.1.1.2")))  # refresh .2
    tracker.add_packets(AGENT, pkts(wire.packet(ts_ms=BASE_MS + 10, remote="1.1.1.9")))
    assert tracker.active_flows == 3
    assert tracker.flows_evicted == 1
    assert [(f.remote_addr, f.end_reason) for f in expired] == [("1.1.1.1", "evicted")]


def test_closing_the_last_stream_flushes_the_agents_flows():
    tracker, expired = make()
    tracker.stream_opened(AGENT)
    tracker.stream_opened(AGENT)
    tracker.add_packets(AGENT, pkts(wire.packet(ts_ms=BASE_MS), wire.packet(ts_ms=BASE_MS, remote="1.1.1.1")))
    tracker.stream_closed(AGENT)
    assert expired == []  # another stream of the agent is still open
    tracker.stream_closed(AGENT)
    assert sorted(f.end_reason for f in expired) == ["stream_end", "stream_end"]
    assert tracker.active_flows == 0


def test_sweep_expires_flows_of_a_quiet_agent_by_wall_time():
    import time
    tracker, expired = make(timeouts=FlowTimeouts(udp_idle=5))
    before = time.monotonic()  # the flow's wall time is later: 2 s after this is under its 5 s however slow we run
    tracker.add_packets(AGENT, pkts(wire.udp_out("10.0.0.5", "1.1.1.1", 4000, 9999, b"a", ts_ms=BASE_MS)))
    tracker.sweep(before + 2)
    assert expired == []
    tracker.sweep(time.monotonic() + 10)
    assert [f.end_reason for f in expired] == ["idle"]


def test_samples_per_flow_are_bounded_in_count_and_bytes():
    tracker, _ = make(limits=FlowLimits(samples_per_flow=2, sample_bytes=10))
    tracker.add_packets(AGENT, pkts(*[wire.packet(ts_ms=BASE_MS + i, payload=bytes([i]) * 50) for i in range(6)]))
    [flow] = tracker.snapshot()
    assert [p.payload for p in flow.samples] == [b"\x00" * 10, b"\x01" * 10]
    assert flow.payload_bytes_out == 300


def test_only_the_sampled_protocols_flows_keep_payload_samples():
    """The server keeps samples only where analysis reads them (TCP, ICMP): a DNS flow still keeps its messages,
    a UDP flow its counters; with every protocol sampled (None) the UDP flows keep theirs as before."""
    traffic = pkts(
        wire.packet(ts_ms=BASE_MS, payload=b"\x16\x03\x01 hello"),  # TCP
        wire.udp_out("10.0.0.5", "10.0.0.1", 4000, 53, wire.dns_query("www.example.org"), ts_ms=BASE_MS + 1),
        wire.udp_in("10.0.0.5", "10.0.0.1", 4000, 53, wire.dns_response("www.example.org", [(1, bytes([1, 2, 3, 4]))]),
                    ts_ms=BASE_MS + 2),
        wire.udp_out("10.0.0.5", "10.0.0.9", 5000, 443, b"quic-initial", ts_ms=BASE_MS + 3),
        wire.packet("10.0.0.5", "10.0.0.7", 0, 0, 1, BASE_MS + 4, payload=b"\x08\x00\x00\x00\x12\x34\x00\x01ping"),
    )
    kept = {}
    for sampled in (frozenset({1, 6}), None):
        tracker, _ = make(limits=FlowLimits(sampled_protocols=sampled))
        tracker.add_packets(AGENT, traffic)
        kept[sampled] = {(f.protocol, f.remote_port): (len(f.samples), len(f.dns), f.packets_out + f.packets_in,
                                                       f.payload_bytes_out + f.payload_bytes_in) for f in tracker.snapshot()}
    every, some = kept[None], kept[frozenset({1, 6})]
    assert {flow: kept[:2] for flow, kept in some.items()} == {(6, 443): (1, 0), (17, 53): (0, 2), (17, 443): (0, 0), (1, 0): (1, 0)}
    assert {flow: kept[:2] for flow, kept in every.items()} == {(6, 443): (1, 0), (17, 53): (2, 2), (17, 443): (1, 0), (1, 0): (1, 0)}
    assert {flow: kept[2:] for flow, kept in some.items()} == {flow: kept[2:] for flow, kept in every.items()}  # counted alike


def test_a_long_lived_dns_socket_is_cut_every_dns_active_timeout():
    tracker, expired = make(timeouts=FlowTimeouts(dns_active=60, dns_idle=30))
    queries = [wire.udp_out("10.0.0.5", "10.0.0.1", 4000, 53, wire.dns_query(f"q{i}.t.example"), ts_ms=BASE_MS + i * 5_000)
               for i in range(14)]  # one query every 5 s from one source port, never idle
    tracker.add_packets(AGENT, pkts(*queries))
    assert [f.end_reason for f in expired] == ["active"]
    assert len(expired[0].dns) == 13  # 0..60 s


def test_a_dns_flow_whose_message_list_is_full_is_analysed_not_truncated():
    tracker, expired = make(limits=FlowLimits(dns_per_flow=4))
    queries = [wire.udp_out("10.0.0.5", "10.0.0.1", 4000, 53, wire.dns_query(f"q{i}.t.example"), ts_ms=BASE_MS + i)
               for i in range(10)]
    tracker.add_packets(AGENT, pkts(*queries))
    assert [(f.end_reason, len(f.dns)) for f in expired] == [("dns_full", 4), ("dns_full", 4)]
    [live] = tracker.snapshot()
    assert [m.qname for m in live.dns] == ["q8.t.example", "q9.t.example"]


def test_dns_responses_are_handed_over_as_they_arrive():
    """As the contract's DnsMessage bytes (C parsed them): a hand-off to another process passes them on unread.
    Once per batch, and only the responses the resolver cache learns from: a name answered with an address."""
    calls = []
    tracker = FlowTracker(lambda flows: None, on_dns_responses=lambda answers: calls.append(
        [(agent, type(msg), dns_message_of(msg).qname) for agent, msg in answers]))
    answer = wire.dns_response("www.example.org", [(1, bytes([1, 2, 3, 4]))])
    v6 = wire.dns_response("v6.example.org", [(28, bytes(range(16)))], qtype=28)
    tracker.add_packets(AGENT, pkts(
        wire.udp_out("10.0.0.5", "10.0.0.1", 4000, 53, wire.dns_query("www.example.org"), ts_ms=BASE_MS),
        wire.udp_in("10.0.0.5", "10.0.0.1", 4000, 53, answer, ts_ms=BASE_MS + 3),
        wire.udp_in("10.0.0.5", "10.0.0.1", 4001, 53, v6, ts_ms=BASE_MS + 4),
        # Responses that resolve nothing: no answer (NXDOMAIN), a text answer, an address without a question.
        wire.udp_in("10.0.0.5", "10.0.0.1", 4002, 53, wire.dns_response("gone.example.org", [], rcode=3), ts_ms=BASE_MS + 5),
        wire.udp_in("10.0.0.5", "10.0.0.1", 4003, 53, wire.dns_response("t.example.org", [(16, b"\x02hi")], qtype=16),
                    ts_ms=BASE_MS + 6),
        wire.udp_in("10.0.0.5", "10.0.0.1", 4004, 53, wire.dns_response("", [(1, bytes([1, 2, 3, 4]))]), ts_ms=BASE_MS + 7),
    ))
    assert calls == [[(AGENT, bytes, "www.example.org"), (AGENT, bytes, "v6.example.org")]]  # the query is no resolution


def test_snapshot_lists_flows_in_the_order_packets_updated_them_even_when_timestamps_go_back():
    tracker, _ = make()
    tracker.add_packets(AGENT, pkts(wire.udp_out("10.0.0.5", "1.1.1.1", 4000, 9999, b"a", ts_ms=BASE_MS + 100)))
    tracker.add_packets(AGENT, pkts(wire.udp_out("10.0.0.5", "1.1.1.2", 4000, 9999, b"b", ts_ms=BASE_MS + 200)))
    assert [f.remote_addr for f in tracker.snapshot()] == ["1.1.1.2", "1.1.1.1"]
    # A late packet of the first flow, stamped before everything: that flow was updated last.
    tracker.add_packets(AGENT, pkts(wire.udp_out("10.0.0.5", "1.1.1.1", 4000, 9999, b"c", ts_ms=BASE_MS + 50)))
    first, second = tracker.snapshot()
    assert (first.remote_addr, second.remote_addr) == ("1.1.1.1", "1.1.1.2")
    assert first.last_ns == (BASE_MS + 100) * 1_000_000 < second.last_ns  # last_ns keeps the newest timestamp
    assert [f.remote_addr for f in tracker.snapshot(limit=1)] == ["1.1.1.1"]
