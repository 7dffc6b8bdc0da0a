"""The behaviour layer with its accounting in C gives exactly what its Python reference gives.

`behaviour.BehaviourLayer` does its per-flow bookkeeping in appliance/native/behaviour_tally.h;
`behaviour_reference.BehaviourLayerReference` is the layer as it was, all Python. Both see the same flows;
every detection (detector, confidence, evidence, flow ids, times; not the random id) after every flow, and
the state (volume windows, series, visitors, throttle, snapshots) every few flows, must be equal.
"""

from __future__ import annotations

import json
import random
from collections import deque

import pytest

from appliance.detection import behaviour
from appliance.detection.analysis_config import AnalysisConfig
from appliance.detection.analysis_config_holder import AnalysisConfigHolder
from appliance.model import FlowRecord, Transport
from appliance.native.dpi import BehaviourCore
from bench.pipeline_bench import finished_flows
from tests.appliance.detection import scenarios as sc
from tests.appliance.detection.behaviour_flows import (NS, T0_NS, MemoryFleet, assert_same, eager_config, layers,
                                                       random_flows, state_of)
from tests.appliance.detection.test_behaviour_cusum import slow_exfiltration


def scenario_flows(*streams: sc.Stream) -> list[FlowRecord]:
    return finished_flows([(s.machine_id, s.sorted()) for s in streams])


def test_the_bench_corpus_gives_the_same_detections() -> None:
    from bench.pipeline_bench import corpus

    holder = AnalysisConfigHolder(AnalysisConfig())
    found = assert_same(finished_flows(corpus()), holder, *layers(holder), state_every=500)
    assert found.get("behaviour.beaconing", 0) > 0, found


def test_the_attack_scenarios_give_the_same_detections() -> None:
    holder = AnalysisConfigHolder(AnalysisConfig())
    flows = scenario_flows(sc.beaconing(minutes=60), sc.volume_spike(), sc.http_exfiltration(),
                           sc.benign_office(1, minutes=60), sc.benign_office(2, minutes=60))
    found = assert_same(flows, holder, *layers(holder), state_every=200)
    assert {"behaviour.beaconing", "behaviour.volume"} <= set(found), found
    # The slow exfiltration, judged with the per-window floor the CUSUM test uses.
    holder = AnalysisConfigHolder(AnalysisConfig.model_validate({"volume": {"min_bytes": 1}}))
    found = assert_same(scenario_flows(slow_exfiltration()), holder, *layers(holder), state_every=200)
    assert found.get("behaviour.cusum", 0) >= 2, found


def test_random_flows_with_the_shipped_config() -> None:
    holder = AnalysisConfigHolder(AnalysisConfig())
    assert_same(random_flows(seed=1, count=3000), holder, *layers(holder), state_every=100)


@pytest.mark.parametrize("seed", [2, 3, 4])
def test_random_flows_with_thresholds_reconfigured_mid_stream(seed: int) -> None:
    rng = random.Random(seed)
    configs = {i: eager_config(rng) for i in range(0, 4000, 400)}
    holder = AnalysisConfigHolder(configs[0])
    found = assert_same(random_flows(seed=seed, count=4000), holder, *layers(holder), configs, state_every=50)
    assert set(found) == {"behaviour.volume", "behaviour.cusum", "behaviour.beaconing"}, found


@pytest.mark.parametrize("max_keys", [1, 3, 7])
def test_small_key_bounds_overflow_alike(max_keys: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(max_keys)
    configs = {i: eager_config(rng) for i in range(0, 1500, 300)}
    holder = AnalysisConfigHolder(configs[0])
    fast, reference = layers(holder, max_keys, monkeypatch)
    assert_same(random_flows(seed=10 + max_keys, count=1500, agents=max_keys + 3), holder, fast, reference, configs,
                state_every=10)
    assert len(fast._volume) <= max_keys and len(fast._series) <= max_keys and len(fast._visitors) <= max_keys


def test_the_fleet_hook_is_told_and_asked_alike() -> None:
    rng = random.Random(5)
    config = eager_config(rng).model_copy(update={"beaconing": AnalysisConfig().beaconing.model_copy(
        update={"common_destination_agents": 10, "max_cv": 2.0, "min_connections": 4, "ignore_ports": []})})
    holder = AnalysisConfigHolder(config)
    flows = random_flows(seed=5, count=2000)
    # Some destinations are common only counted over the fleet (8 agents here, 10 needed), one is common here.
    others = {(f.remote_ip, f.remote_port): {f"elsewhere-{i}" for i in range(n)} for f, n in zip(flows[:3], (1, 5, 30))}
    fast, reference = layers(holder)
    fast.fleet, reference.fleet = MemoryFleet(others), MemoryFleet(others)
    found = assert_same(flows, holder, fast, reference, state_every=100)
    assert fast.fleet.calls == reference.fleet.calls
    assert {c[0] for c in fast.fleet.calls} == {"visited", "agents"} and found.get("behaviour.beaconing", 0) > 0
    fast.fleet = None
    assert fast.fleet is None


def test_snapshot_and_restore_round_trips_continue_alike() -> None:
    rng = random.Random(6)
    configs = {i: eager_config(rng) for i in range(0, 3000, 500)}
    holder = AnalysisConfigHolder(configs[0])
    flows = random_flows(seed=6, count=3000)
    fast, reference = layers(holder)
    for part in range(0, 3000, 600):
        assert_same(flows[part:part + 600], holder, fast, reference, {i - part: c for i, c in configs.items()})
        agents = set(fast._volume) | {k[0] for k in fast._series}
        snapshot = json.loads(json.dumps(fast.snapshot(agents)))  # through JSON, as in Redis
        assert snapshot == json.loads(json.dumps(reference.snapshot(agents)))
        fast, reference = layers(holder)
        for agent, state in snapshot.items():
            fast.restore(agent, state)
            reference.restore(agent, state)
        assert state_of(fast) == state_of(reference)


def test_a_zero_window_fails_alike() -> None:
    config = AnalysisConfig.model_validate({"volume": {"bucket_s": 1e-10}})  # int(bucket_s * 1e9) == 0
    holder = AnalysisConfigHolder(config)
    fast, reference = layers(holder)
    flow = random_flows(seed=7, count=1)[0]
    with pytest.raises(ZeroDivisionError):
        reference.analyze(flow)
    with pytest.raises(ZeroDivisionError):
        fast.analyze(flow)


def test_figures_the_c_does_not_read_take_the_python_path_alike() -> None:
    """A baseline holding ints where the C reads floats (or a time past int64) is judged by the Python judges."""
    rng = random.Random(8)
    holder = AnalysisConfigHolder(eager_config(rng))
    flows = random_flows(seed=8, count=1200)
    fast, reference = layers(holder)
    assert_same(flows[:600], holder, fast, reference)
    for layer in (fast, reference):
        for state in layer._volume.values():
            state.stats.mean, state.reference.m2 = round(state.stats.mean), round(state.reference.m2)
            state.cusum = int(state.cusum)
    assert_same(flows[600:], holder, fast, reference, state_every=20)


def test_beacon_figures_are_the_python_ones_bit_for_bit() -> None:
    """series_scores (figures in C) equals beacon_scores on series of every shape, and the C declines only what
    it cannot compute exactly."""
    rng = random.Random(9)
    declined = 0
    for n in range(3000):
        length = rng.choice([1, 2, 3, 4, 5, 8, 17, 64, 300])
        period = rng.choice([1, 60, 61.7, 3600]) * NS
        t = rng.choice([T0_NS, 0, -T0_NS])
        series = []
        for _ in range(length):
            t += int(period * rng.choice([1, 1, 2, 3, 0.01, rng.uniform(0.5, 1.5), rng.uniform(0.97, 1.03)]))
            series.append((t, rng.choice([0, 512, rng.randrange(10**6), 2**63 - 1, -5])))
        if n % 7 == 0:
            rng.shuffle(series)  # out of order
        if n % 101 == 0:
            series.append((2**62, 1))  # beyond what the C takes
        min_interval = rng.choice([0.0, 0.5, 5.0, 61.0])
        expected = behaviour.beacon_scores([s for s, _ in series], [b for _, b in series], min_interval)
        assert behaviour.series_scores(deque(series), min_interval) == expected, (series, min_interval)
        declined += BehaviourCore.beacon_figures(series, min_interval) is None
    assert 0 < declined < 60


def test_the_cv_cutoff_decides_as_the_rounded_cv_does() -> None:
    """The C rules a series out when its cv is above max_cv + 0.001 (round(cv, 3) is then above max_cv): with
    max_cv set around a beacon's own cv, on both sides of the cutoff and of the rounding, the reports are the
    reference's, and some settings report it while others do not."""
    rng = random.Random(30)
    t, flows = T0_NS, []
    for n in range(40):
        t += int(60 * NS * rng.uniform(0.9, 1.1))
        flows.append(FlowRecord(f"cv{n:06d}", "agent-cv", 6, Transport.TCP, 0x0A000105, 40_000 + n, 0xC6336414, 8443, t,
                                t + NS, 10, 10, 900 + rng.randrange(50), 1000, 900, 500, 0x1B, 0, "", "tcp_close", [], []))
    cv = BehaviourCore.beacon_figures([(f.first_ns, f.bytes_out) for f in flows], 5.0)[2]
    reported = set()
    for offset in (-0.003, -0.0011, -0.001, -0.0006, -0.0005, -0.0004, 0.0, 0.0004, 0.0005, 0.0006, 0.001, 0.0011, 0.003):
        config = AnalysisConfig.model_validate({"detectors": {"report_interval_s": 1.0},
                                                "beaconing": {"max_cv": cv + offset, "min_connections": 8}})
        holder = AnalysisConfigHolder(config)
        found = assert_same(flows, holder, *layers(holder))
        reported.add(found.get("behaviour.beaconing", 0) > 0)
    assert reported == {True, False}
