"""appliance.native.dpi.FactsMemo (facts_memo.h), the memo and common path under FlowFacts: what is kept and for how
long, what goes to Python, refusals, no leak, collected with its owner. The differential against the Python
reference (facts and every counter, with and without views) is tests/appliance/detection/test_facts.py;
test_sanitized.py runs this file under ASan/UBSan."""

from __future__ import annotations

import gc
import random
import tracemalloc
import weakref
from typing import Any

import pytest

from appliance.detection.facts import FACTS_KEPT, Facts, FlowFacts, sample_reader
from appliance.detection.dpi.tls_fingerprint import FingerprintMemo
from appliance.model import Transport
from appliance.native.dpi import FactsMemo
from tests.appliance.detection import tls_records as tr
from tests.appliance.detection.test_facts import flow_of
from tests.appliance.detection.test_tls_benign import chrome


def tls_flow(n: int) -> Any:
    return flow_of([(1, chrome(f"host{n}.example", random.Random(n))), (2, tr.server_hello(0x1301, [0x002B], selected=0x0304))])


def test_a_flow_is_read_once_while_kept_and_forgotten_after_two_generations() -> None:
    facts = FlowFacts(tls_views=False)
    first = tls_flow(0)
    got = facts.facts(first)
    assert got.tls is not None and got.client_hello.sni == "host0.example"
    assert facts.facts(first) is got and facts.tls_handshakes == 1
    others = [tls_flow(n) for n in range(1, 2 * FACTS_KEPT + 1)]
    for n, flow in enumerate(others[: FACTS_KEPT - 1]):
        facts.facts(flow)
    assert facts.facts(first) is got  # still in the first generation
    for flow in others[FACTS_KEPT - 1 :]:
        facts.facts(flow)
    again = facts.facts(first)  # two generations later: read again
    assert again is not got and again.client_hello.sni == "host0.example"
    assert facts.tls_handshakes == 2 * FACTS_KEPT + 2


def test_what_has_nothing_to_read_is_an_empty_facts_and_what_is_rare_goes_to_python() -> None:
    calls: list[Any] = []
    memo = FactsMemo(sample_reader(FingerprintMemo()), lambda flow, found: calls.append(found) or found[0], Transport.TCP, Facts, 4, False)
    udp = flow_of([(1, b"\x16\x03\x01")])
    udp.transport = Transport.UDP
    empty = memo.facts(udp)
    assert empty == Facts() and memo.facts(udp) is empty and not calls
    no_samples = flow_of([])
    assert memo.facts(no_samples) == Facts()
    http = flow_of([(1, b"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n")])
    memo.facts(http)
    assert len(calls) == 1 and calls[0][1] == [b"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n"]  # the payloads to parse
    memo.facts(tls_flow(1))
    assert len(calls) == 1 and memo.tls_handshakes == 1  # counted in C
    views = FactsMemo(sample_reader(FingerprintMemo()), lambda flow, found: calls.append(found) or found[0], Transport.TCP, Facts, 4, True)
    views.facts(tls_flow(2))
    assert len(calls) == 2 and views.tls_handshakes == 0  # with views every hello goes to Python, which counts it
    garbage = flow_of([(1, b"\x16\x03\x01\x00\x05hello")])
    memo.facts(garbage)
    assert memo.tls_unreadable == 1


def test_refusals_are_exceptions_and_keep_nothing() -> None:
    with pytest.raises(TypeError):
        FactsMemo((1, 2), print, Transport.TCP, Facts, 4, False)  # not a reader
    with pytest.raises(ValueError):
        FactsMemo(sample_reader(FingerprintMemo()), print, Transport.TCP, Facts, 0, False)
    with pytest.raises(RuntimeError):
        FactsMemo.__new__(FactsMemo).facts(tls_flow(0))  # never initialised
    facts = FlowFacts(tls_views=False)
    with pytest.raises(AttributeError):
        facts.facts(object())  # no transport
    broken = tls_flow(3)
    broken.samples = [object()]
    with pytest.raises(Exception):
        facts.facts(broken)
    broken.samples = tls_flow(3).samples
    assert facts.facts(broken).tls is not None  # nothing kept from the failure: read now
    failing = FactsMemo(sample_reader(FingerprintMemo()), lambda flow, found: 1 / 0, Transport.TCP, Facts, 4, True)
    with pytest.raises(ZeroDivisionError):
        failing.facts(tls_flow(4))


def test_many_flows_hold_no_memory_past_two_generations() -> None:
    facts = FlowFacts(tls_views=False)
    flows = [tls_flow(n % 50) for n in range(3000)]
    for flow in flows:  # warm: the fingerprint memos full
        facts.facts(flow)
    fresh = [tls_flow(n % 50) for n in range(3000)]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for flow in fresh:
            facts.facts(flow)
        del flows
        gc.collect()
        grown = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(before, "filename"))
    finally:
        tracemalloc.stop()
    assert grown < 2 * FACTS_KEPT * 4000, grown  # two generations of facts at most, not 3000


def test_flow_facts_is_collected_though_it_holds_its_own_method() -> None:
    facts = FlowFacts(tls_views=False)
    facts.facts(tls_flow(0))
    gone = weakref.ref(facts)
    del facts
    gc.collect()
    assert gone() is None
