"""OutboxHandOff: what the tracker and the gRPC handlers call to hand flows and DNS items to the analysis process.

Flows Python held (FlowRecords: ICMP) and DNS messages it parsed go in encoded as the contract says, beside the C
table's own; drops are counted in total, per agent and to on_drop. The frames themselves: tests/appliance/native/
test_outbox.py.
"""

from __future__ import annotations

import socket
import struct

from appliance.analysis.outbox import OutboxHandOff
from appliance.flows import record_codec
from appliance.model import DnsAnswer, DnsMessage

from tests.appliance.detection import scenarios as sc
from tests.appliance.flows.test_record_codec import flows_of

HEAD = struct.Struct("!cI")


def frames_of(hand_off: OutboxHandOff) -> list[tuple[bytes, bytes]]:
    """Everything waiting, written to a socketpair and read back."""
    ours, theirs = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    try:
        hand_off._outbox.poke(flush=True, want_idle=True)
        assert hand_off._outbox.run(ours) == (0, 0)
        ours.shutdown(socket.SHUT_WR)
        frames = []
        while head := theirs.recv(HEAD.size, socket.MSG_WAITALL):
            kind, size = HEAD.unpack(head)
            frames.append((kind, theirs.recv(size, socket.MSG_WAITALL)))
        return frames
    finally:
        ours.close()
        theirs.close()


def test_records_python_held_and_parsed_messages_travel_as_the_contract_says() -> None:
    flows = flows_of(sc.icmp_tunnel(), sc.benign_office(1, minutes=2))  # FlowRecords, ICMP among them
    assert any(f.protocol == 1 for f in flows)
    hand_off = OutboxHandOff(10_000, None, 10_000, 30.0)
    answer = DnsMessage(7, True, 0, "example.org", 1, 1, [DnsAnswer("example.org", 1, 60, "192.0.2.7")])
    hand_off.observe_answers([("agent-1", answer)])
    hand_off.observe_dns("agent-2", answer)
    hand_off.submit_many(flows)
    assert hand_off.queue_depth == len(flows)
    (dns_kind, dns), (flows_kind, batch) = frames_of(hand_off)
    assert dns_kind == b"D" and record_codec.decode_dns(dns) == record_codec.decode_dns(
        record_codec.encode_dns([("agent-1", answer, False), ("agent-2", answer, True)]))
    assert flows_kind == b"F"
    got, sent = record_codec.decode(batch), record_codec.decode(record_codec.encode(flows))
    by_id = lambda r: r.flow_id  # noqa: E731  (agents in turn: each agent's flows in the order handed over)
    assert sorted(got, key=by_id) == sorted(sent, key=by_id)
    for agent in {f.agent_id for f in flows}:
        assert [r.flow_id for r in got if r.agent_id == agent] == [f.flow_id for f in flows if f.agent_id == agent]


def test_drops_are_counted_in_total_per_agent_and_reported() -> None:
    reported: list[tuple[str, int]] = []
    hand_off = OutboxHandOff(10, lambda agent, count: reported.append((agent, count)), 4, 30.0)
    entry = record_codec.entries(flows_of(sc.benign_office(1, minutes=1))[:1])[0]
    hand_off._outbox.put([("busy", entry)] * 10)
    hand_off._outbox.put([("quiet", entry)] * 2)  # room made from the busy agent's newest
    hand_off.submit_many([])
    assert hand_off.flows_dropped == 2 and hand_off.queue_depth == 10
    flows = flows_of(sc.benign_office(2, minutes=1))[:3]
    hand_off.submit_many(flows)  # full: these take the busy agent's place too (it still holds the most)
    assert reported == [("busy", 3)] and hand_off.dropped_by_agent == {"busy": 3}
    assert hand_off.flows_dropped == 5
