"""DnsList (appliance/native/dns_list.h): a decoded flow's DNS messages, kept as C entries and made into DnsMessage
objects only when Python asks. It must stand for the list upb reads in every way Python can see, and the C loops
that read its entries in place must read what they read from the objects (their differential tests run both ways:
test_dns_windows.py, test_signature_scan.py). test_sanitized.py runs this file against an ASan/UBSan build."""

from __future__ import annotations

import copy
import gc
import pickle

import pytest

from appliance.detection.dpi.dga_signals import DgaSignals
from appliance.flows import record_codec
from appliance.model import DnsAnswer, DnsMessage, FlowRecord, Transport
from appliance.native import dpi
from appliance.native.fastpath import DnsList


def decoded(flows: list[FlowRecord]) -> list[FlowRecord]:
    """`flows` as the analysis process reads them: through the flow record contract, DNS messages in DnsLists."""
    data = record_codec.encode(flows)
    assert record_codec.decode(data) == flows  # a second reading is compared: comparing makes every message
    made = record_codec.decode(data)
    assert all(type(flow.dns) is DnsList and flow.dns.made == 0 for flow in made)
    return made


def _messages() -> list[DnsMessage]:
    return [
        DnsMessage(7, False, 0, "a.example.com", 16, 1, timestamp_ns=10**9),
        DnsMessage(7, True, 0, "a.example.com", 16, 1, [DnsAnswer("a.example.com", 16, 300, "text"),
                                                         DnsAnswer("a.example.com", 16, 60, "more")], False, 2 * 10**9),
        DnsMessage(8, True, 3, "b.example.com", 1, 1, timestamp_ns=0),
        DnsMessage(0, False, 0, "", 0, 0, malformed=True),
        DnsMessage(65535, False, 0, "\u00fcnicode.example", 28, 1, timestamp_ns=3 * 10**9),
    ]


def _flow(messages: list[DnsMessage], flow_id: str = "f", agent: str = "a") -> FlowRecord:
    return FlowRecord(flow_id, agent, 17, Transport.UDP, 1, 1000, 2, 53, 10**9, 4 * 10**9, packets_out=len(messages),
                      dns=messages)


def test_a_decoded_flows_messages_stand_for_the_list_they_were() -> None:
    messages = _messages()
    (flow,) = decoded([_flow(messages)])
    dns = flow.dns
    assert len(dns) == 5 and bool(dns) and dns.made == 0
    assert dns == messages and not (dns != messages) and messages == dns and dns.made == 5
    assert [type(m) for m in dns] == [DnsMessage] * 5
    assert dns[1].answers == messages[1].answers and dns[-1] == messages[-1]
    assert dns[0] is dns[0] and list(dns)[2] is dns[2]  # made once, then kept
    assert repr(dns) == repr(messages)
    assert dns + [] == messages and type(dns + []) is list
    assert copy.deepcopy(dns) == messages and type(copy.deepcopy(dns)) is list
    assert pickle.loads(pickle.dumps(dns)) == messages
    assert dns != tuple(messages) and dns != messages[:4]
    with pytest.raises(IndexError):
        dns[5]
    with pytest.raises(TypeError):
        hash(dns)
    with pytest.raises(TypeError):
        dns[0] = messages[0]  # type: ignore[index]
    (empty,) = decoded([_flow([])])
    assert len(empty.dns) == 0 and not empty.dns and empty.dns == []


def test_a_message_made_from_an_entry_holds_its_own_answers_list() -> None:
    flows = decoded([_flow(_messages())])
    first, second = flows[0].dns[1], flows[0].dns[1]
    first.answers.append(DnsAnswer("x", 1, 1, "1.2.3.4"))  # what a caller may do with a DnsMessage
    assert second.answers is first.answers and len(second.answers) == 3  # the same object: the change is seen
    assert flows[0].dns[2].answers == [] and flows[0].dns[2].answers is not flows[0].dns[3].answers


def test_lists_made_and_dropped_leave_no_objects_behind() -> None:
    flows = [_flow(_messages(), f"f{i}") for i in range(20)]
    data = record_codec.encode(flows)
    for _ in range(3):  # warm
        [list(f.dns) for f in record_codec.decode(data)]
    gc.collect()
    before = len(gc.get_objects())
    for _ in range(50):
        [list(f.dns) for f in record_codec.decode(data)]
        [f.dns[0] for f in record_codec.decode(data)]
    gc.collect()
    assert len(gc.get_objects()) - before < 50


def _dns_scanner(agents: dict) -> dpi.DnsScanner:
    scanner = dpi.DnsScanner(agents, {}, {}, lambda name: (name, name), {}, lambda label: 0.5, 10, 10)
    scanner.configure(10**9, 1, 0.5, 10**9, 1, 10**9, 1.0, 50.0, 10.0, 3.0, 1, 1, 1.0, 0.0, 1, 0.0, 1, 0.0)
    return scanner


def test_an_entry_past_the_timestamp_bound_is_refused_as_the_object_is_and_changes_nothing() -> None:
    """The C loops check what they read from entries as they check the objects' fields: a timestamp past 2**62
    (which only a broken writer would put in a batch) raises and leaves the state as it was."""
    hostile = [DnsMessage(1, False, 0, "x.example.com", 16, 1, timestamp_ns=2**63)]
    (flow,) = decoded([_flow(hostile)])
    agents: dict = {}
    with pytest.raises(ValueError, match="timestamp_ns out of range"):
        _dns_scanner(agents).scan(flow)
    assert agents == {}
    askers: dict = {}
    with pytest.raises(ValueError, match="timestamp_ns out of range"):
        dpi.dga_scan(flow, agents, DgaSignals._new_state, askers, {}, lambda name: (name, name), 3, 1e12, 10**12, 4, 4, 4, 1)
    assert agents == {} and askers == {}
    (fine,) = decoded([_flow(_messages())])
    _dns_scanner(agents).scan(fine)  # and it keeps serving
    assert list(agents) == ["a"] and agents["a"].flow_ids == ["f"]


def test_the_c_loops_take_a_decoded_flow_as_they_take_the_same_flow_with_a_list() -> None:
    """One flow each way, fresh state each: the same outcome and the same state after it."""
    for messages in (_messages(), _messages()[:1], _messages()[2:3], []):
        plain = _flow(messages)
        (fast,) = decoded([plain])
        states = []
        for flow in (plain, fast):
            agents: dict = {}
            result = _dns_scanner(agents).scan(flow)
            dga_agents: dict = {}
            askers: dict = {}
            dga = dpi.dga_scan(flow, dga_agents, DgaSignals._new_state, askers, {}, lambda name: (name, name), 3, 1e12,
                               10**12, 4, 4, 4, 1)
            states.append((None if result is None else result[1:3], {a: (s.flow_ids, s.answered, s.nx_count, list(s.domains))
                                                                    for a, s in agents.items()},
                           dga if dga is None else dga[1:], {a: (dict(s.failed), s.answers, s.failures, list(s.ttls))
                                                             for a, s in dga_agents.items()}, askers))
        assert states[0] == states[1]


def test_the_c_loops_read_the_entries_without_making_messages(tmp_path) -> None:
    """What the DnsList is for: the DNS scanner, the DGA scan and the signature loop read a decoded flow's messages
    in place. The signature loop makes a message only to call the Python matcher on a name its memo lacks, or for a
    rule that matched it (a hit carries its first message)."""
    import random
    from pathlib import Path

    import yaml

    from appliance.detection.signatures.engine import RuleSet
    from appliance.detection.signatures.rules import parse_rule
    from tests.appliance.detection.signatures.test_engine import GivenFacts, engines
    from tests.appliance.native.test_signature_scan import dns_flow

    rng = random.Random(3)
    flows = decoded([dns_flow(rng, n) for n in range(60)])
    for flow in flows:
        _dns_scanner({}).scan(flow)
        dpi.dga_scan(flow, {}, DgaSignals._new_state, {}, {}, lambda name: (name, name), 3, 1e12, 10**12, 4, 4, 4, 1)
    assert sum(flow.dns.made for flow in flows) == 0
    shipped = sorted((Path(__file__).resolve().parents[3] / "rules").glob("dns-*.yaml"))
    rules = [parse_rule(yaml.safe_load(path.read_text()), path.name)[0] for path in shipped]
    engine, _ = engines(tmp_path, facts=GivenFacts())
    engine.ruleset = RuleSet.of([rule for rule in rules if rule is not None])
    hits = sum(len(engine.analyze(flow)) for flow in flows)
    made, messages = sum(flow.dns.made for flow in flows), sum(len(flow.dns) for flow in flows)
    assert 0 < hits and made < messages / 2, (hits, made, messages)  # these flows hit often: 96 of 363


def test_a_cycle_through_a_made_message_is_collected_and_the_list_still_reads() -> None:
    """A caller may store the list in one of its messages' answers: the collector sees the made messages and frees
    the cycle. Making every message (a copy) keeps the ones made before."""
    def alive() -> int:
        return sum(type(o) is DnsList for o in gc.get_objects())

    gc.collect()
    before = alive()
    (flow,) = decoded([_flow(_messages())])
    dns = flow.dns
    dns[1].answers.append(dns)  # type: ignore[arg-type]
    del flow, dns
    assert alive() == before + 1  # held by its own message: only the collector can free it
    gc.collect()
    assert alive() == before  # the cycle was found and freed
    (again,) = decoded([_flow(_messages())])
    message = again.dns[1]
    again.dns.__reduce__()  # makes every message
    assert again.dns[1] is message and again.dns == _messages()
