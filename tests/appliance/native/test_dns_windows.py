"""The DNS detectors' C accounting (appliance/native/dns_windows.h): equal to Python, robust, no leak.

test_sanitized.py runs this file again against an ASan/UBSan build of the module.
"""

from __future__ import annotations

import gc
import random
import tracemalloc

import pytest

from appliance.detection.analysis_config import AnalysisConfig
from appliance.model import DnsMessage, FlowRecord, Transport
from appliance.detection.dpi.dga_signals import DgaSignals
from appliance.native import dpi
from tests.appliance.native.test_dns_list import decoded
from tests.appliance.detection.dns_flows import (analyzers, assert_same, assert_same_dga, dga_analyzers, eager_config,
                                                 random_flows)


def _as_built(flows: list[FlowRecord]) -> list[FlowRecord]:
    return flows


# The flows as built (DNS messages in lists: the server's own analysis) and as the analysis process decodes them (in
# DnsLists, whose entries the C loops read in place): the same findings as the reference either way.
READS = pytest.mark.parametrize("read", [_as_built, decoded], ids=["lists", "decoded"])


@READS
def test_random_flows_match_the_python_reference_under_small_bounds(read) -> None:
    rng = random.Random(11)
    configs = {i: eager_config(rng) for i in range(0, 600, 150)}
    flows = read(random_flows(seed=11, count=600, agents=6))
    assert assert_same(flows, configs, max_keys=4, max_events=3, state_every=10) > 0


@READS
def test_dga_scan_matches_the_python_reference_under_small_bounds(read) -> None:
    rng = random.Random(12)
    configs = {i: eager_config(rng) for i in range(0, 600, 150)}
    assert assert_same_dga(read(random_flows(seed=12, count=600, agents=6)), configs, (3, 4, 2), state_every=10) > 0


def _scanner(agents: dict | None = None) -> dpi.DnsScanner:
    scanner = dpi.DnsScanner({} if agents is None else agents, {}, {}, lambda name: (name, name), {}, lambda label: 0.5, 10, 10)
    scanner.configure(10**9, 1, 0.5, 10**9, 1, 10**9, 1.0, 50.0, 10.0, 3.0, 1, 1, 1.0, 0.0, 1, 0.0, 1, 0.0)
    return scanner


def _flow(**fields: object) -> FlowRecord:
    flow = FlowRecord("f", "a", 17, Transport.UDP, 1, 1000, 2, 53, 10**9, 2 * 10**9, packets_out=1,
                      dns=[DnsMessage(1, False, 0, "x.example.com", 16, 1, timestamp_ns=10**9)])
    for name, value in fields.items():
        setattr(flow, name, value)
    return flow


@pytest.mark.parametrize("fields", [
    {"dns": 5}, {"dns": [object()]}, {"first_ns": "1"}, {"last_ns": 2**64}, {"packets_out": -1},
    {"dns": [DnsMessage(1, False, 0, b"x.com", 1, 1)]},  # type: ignore[arg-type]
    {"dns": [DnsMessage(1, False, 0, "x.com", "1", 1)]},  # type: ignore[arg-type]
    {"dns": [DnsMessage(1, True, 2**70, "x.com", 1, 1, timestamp_ns=-5)]},
])
def test_hostile_records_raise_and_change_nothing(fields: dict[str, object]) -> None:
    agents: dict = {}
    scanner = _scanner(agents)
    with pytest.raises((TypeError, ValueError, AttributeError)):
        scanner.scan(_flow(**fields))
    assert agents == {}
    assert scanner.scan(_flow())[1] == 1  # and it keeps serving
    assert agents["a"].flow_ids == ["f"] and agents["a"].answered == 0 and list(agents["a"].domains) == ["x.example.com"]


@pytest.mark.parametrize("fields", [
    {"dns": 5}, {"dns": [object()]}, {"last_ns": 2**64},
    {"dns": [DnsMessage(1, False, 0, b"x.com", 1, 1)]},  # type: ignore[arg-type]
    {"dns": [DnsMessage(1, True, 3, "x.com", 1, 1, timestamp_ns=-5)]},
    {"dns": [DnsMessage(1, True, 0, "x.com", 1, 1, answers=[object()])]},  # type: ignore[list-item]
])
def test_dga_scan_refuses_hostile_records_and_changes_nothing(fields: dict[str, object]) -> None:
    agents: dict = {}
    askers: dict = {}

    def scan(flow: FlowRecord) -> object:
        return dpi.dga_scan(flow, agents, DgaSignals._new_state, askers, {}, lambda name: (name, name), 3, 1e12, 10**12, 4, 4, 4, 1)

    with pytest.raises((TypeError, ValueError, AttributeError)):
        scan(_flow(**fields))
    assert agents == {} and askers == {}
    assert scan(_flow()) is None  # nothing failed, the window runs on: and it keeps serving
    assert list(askers) == ["x.example.com"] and agents["a"].answers == 0


def test_a_split_or_score_that_fails_raises_cleanly() -> None:
    def broken(name: str) -> tuple[str, str]:
        raise KeyError(name)

    scanner = dpi.DnsScanner({}, {}, {}, broken, {}, lambda label: 0.5, 10, 10)
    scanner.configure(10**9, 1, 0.5, 10**9, 1, 10**9, 1.0, 50.0, 10.0, 3.0, 1, 1, 1.0, 0.0, 1, 0.0, 1, 0.0)
    with pytest.raises(KeyError):
        scanner.scan(_flow())
    scanner = dpi.DnsScanner({}, {}, {}, lambda name: ("x", 1), {}, lambda label: 0.5, 10, 10)  # not two str
    scanner.configure(10**9, 1, 0.5, 10**9, 1, 10**9, 1.0, 50.0, 10.0, 3.0, 1, 1, 1.0, 0.0, 1, 0.0, 1, 0.0)
    with pytest.raises(TypeError):
        scanner.scan(_flow())
    with pytest.raises(RuntimeError):
        dpi.DnsScanner({}, {}, {}, broken, {}, broken, 1, 1).scan(_flow())  # not configured
    with pytest.raises(RuntimeError):
        dpi.DgaScanner({}, DgaSignals._new_state, {}, {}, broken, 4, 4, 4).scan(_flow())  # not configured
    scanner = dpi.DgaScanner({}, DgaSignals._new_state, {}, {}, broken, 4, 4, 4)
    scanner.configure(3, 1e12, 10**12, 1)
    with pytest.raises(KeyError):
        scanner.scan(_flow())
    scanner = _scanner({"a": "not an AgentDns"})
    with pytest.raises(TypeError):
        scanner.scan(_flow())


def test_no_leak_over_many_flows() -> None:
    flows = random_flows(seed=5, count=300)
    config = AnalysisConfig()

    def run() -> None:
        fast, _ = analyzers(max_keys=20, max_events=16)
        signals, _ = dga_analyzers(10, 20, 5)
        for flow in flows:
            fast.analyze(flow, config)
            signals.analyze(flow, config)

    run()  # warm up memos and free lists
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(5):
            run()
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 64 * 1024, grown
