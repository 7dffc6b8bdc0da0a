"""The DNS detectors with their accounting in C give exactly what their Python reference gives.

`dns.DnsAnalyzer` and `dga_signals.DgaSignals` run their per-message loops in appliance/native/dns_windows.h;
`dns_reference.DnsAnalyzerReference` and `dga_signals_reference.DgaSignalsReference` are the same detectors
with those loops in Python. Both see the same flows; every detection (detector, confidence, evidence, flow
ids, times) and the state the judges read must be equal.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from appliance.detection.analysis_config import AnalysisConfig
from appliance.model import DnsMessage
from bench.pipeline_bench import corpus, finished_flows
from tests.appliance.detection.dns_flows import (T0_NS, agent_state, analyzers, as_dicts, assert_same, assert_same_dga,
                                                 dga_analyzers, dga_state, eager_config, random_flows, window_state)


@pytest.fixture(scope="module")
def corpus_dns_flows() -> list:
    return [f for f in finished_flows(corpus()) if f.dns]


def test_the_bench_corpus_and_its_attacks_give_the_same_detections(corpus_dns_flows: list) -> None:
    fast, reference = analyzers()
    config = AnalysisConfig()
    detectors: Counter[str] = Counter()
    for i, flow in enumerate(corpus_dns_flows):
        got = as_dicts(fast.analyze(flow, config))
        assert got == as_dicts(reference.analyze(flow, config)), f"flow {i} ({flow.agent_id}) differs"
        detectors.update(d["detector"] for d in got)
    assert window_state(fast) == window_state(reference)
    assert agent_state(fast) == agent_state(reference)
    # The corpus holds the tunnels, the DGA host and the flood of scenarios.py: the comparison covers every detector.
    assert set(detectors) >= {"dpi.dns.tunnel_names", "dpi.dns.tunnel_volume", "dpi.dns.dga", "dpi.dns.nxdomain",
                              "dpi.dns.flood_rate"}, detectors


def test_random_flows_with_the_shipped_config() -> None:
    assert_same(random_flows(seed=1, count=1500), state_every=50) > 0


def test_random_flows_with_thresholds_reconfigured_mid_stream() -> None:
    rng = random.Random(7)
    configs = {i: eager_config(rng) for i in range(0, 2500, 250)}
    assert assert_same(random_flows(seed=2, count=2500), configs, state_every=100) > 100


@pytest.mark.parametrize("max_keys, max_events", [(3, 2), (7, 5), (50, 1)])
def test_small_bounds_overflow_alike(max_keys: int, max_events: int) -> None:
    rng = random.Random(max_keys)
    configs = {i: eager_config(rng) for i in range(0, 800, 200)}
    assert_same(random_flows(seed=max_keys, count=800, agents=max_keys + 3), configs, max_keys, max_events, state_every=20)
    fast, _ = analyzers(max_keys, max_events)
    for flow in random_flows(seed=3, count=400, agents=20):
        fast.analyze(flow, configs[0])
        assert len(fast._windows) <= max_keys and len(fast._agents) <= max_keys
        assert all(w.queries <= max_events for w in fast._windows.values())
        assert all(a.answered <= max_events and len(a.flow_ids) <= 20 for a in fast._agents.values())


def test_the_newest_bucket_counts_the_scanner_keeps_equal_its_buckets() -> None:
    # The flood gate reads the two newest buckets' counts from the scanner, not the dict: late flows, flows over
    # several buckets and new newest buckets must keep both equal to the dict after every flow.
    fast, _ = analyzers()
    rng = random.Random(21)
    configs = {i: eager_config(rng) for i in range(0, 2000, 400)}
    config = AnalysisConfig()
    for i, flow in enumerate(random_flows(seed=21, count=2000, agents=3)):
        config = configs.get(i, config)
        fast.analyze(flow, config)
        for agent in fast._agents.values():
            assert (agent.top_count, agent.previous_count) == (agent.buckets.get(agent.top_bucket, 0),
                                                               agent.buckets.get(agent.top_bucket - 1, 0)), i


# The config object kept (analyze's inlined scan) or a new one each call (the scan that configures first).
SAME_OR_NEW_CONFIG = pytest.mark.parametrize("config_of", [lambda c: c, lambda c: AnalysisConfig()], ids=["same", "new"])


@SAME_OR_NEW_CONFIG
def test_a_flow_with_a_timestamp_out_of_range_is_counted_and_changes_nothing(config_of) -> None:
    fast, _ = analyzers()
    flows = random_flows(seed=4, count=200)
    config = AnalysisConfig()
    for flow in flows:
        fast.analyze(flow, config)
    windows, agents = window_state(fast), agent_state(fast)
    bad = next(f for f in reversed(flows) if f.dns)  # with messages left when one is taken off
    bad.dns = [*bad.dns, DnsMessage(1, False, 0, "zzz.example.com", 16, 1, timestamp_ns=2**63)]
    assert fast.analyze(bad, config_of(config)) == []
    bad.dns, bad.first_ns = bad.dns[:-1], -1
    assert fast.analyze(bad, config_of(config)) == []
    bad.first_ns, bad.last_ns = T0_NS + 100 * 10**9, T0_NS  # last before first: no ingested flow looks like this
    bad.packets_out = 5
    assert fast.analyze(bad, config_of(config)) == []
    assert fast.out_of_range_flows == 3
    assert window_state(fast) == windows and agent_state(fast) == agents
    assert fast.analyze(flows[0], config_of(config)) is not None  # and it keeps serving


def test_dga_signals_on_the_bench_corpus_give_the_same_detections(corpus_dns_flows: list) -> None:
    assert assert_same_dga(corpus_dns_flows, state_every=500) > 0  # the corpus's DGA host raises nx_burst and dga_lexical


def test_dga_signals_on_random_flows_reconfigured_mid_stream() -> None:
    rng = random.Random(8)
    configs = {i: eager_config(rng) for i in range(0, 3000, 300)}
    assert assert_same_dga(random_flows(seed=8, count=3000, agents=6), configs, state_every=100) > 100


@pytest.mark.parametrize("bounds", [(2, 3, 1), (4, 1, 3), (50, 20, 2)])
def test_dga_signals_small_bounds_overflow_alike(bounds: tuple[int, int, int]) -> None:
    rng = random.Random(bounds[0])
    configs = {i: eager_config(rng) for i in range(0, 800, 200)}
    assert_same_dga(random_flows(seed=bounds[1], count=800, agents=7), configs, bounds, state_every=20)


@SAME_OR_NEW_CONFIG
def test_a_dga_flow_with_a_timestamp_out_of_range_is_counted_and_changes_nothing(config_of) -> None:
    fast, _ = dga_analyzers()
    flows = random_flows(seed=9, count=200)
    config = AnalysisConfig()
    for flow in flows:
        fast.analyze(flow, config)
    state = dga_state(fast)
    bad = flows[-1]
    bad.dns = [*bad.dns, DnsMessage(1, True, 3, "zzz.example.com", 1, 1, timestamp_ns=2**62)]
    assert fast.analyze(bad, config_of(config)) == []
    assert fast.out_of_range_flows == 1 and dga_state(fast) == state
