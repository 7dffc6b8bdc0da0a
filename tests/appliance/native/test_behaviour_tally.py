"""The behaviour layer's C accounting (appliance/native/behaviour_tally.h): equal to Python, robust, no leak.

test_sanitized.py runs this file again against an ASan/UBSan build of the module; the full differential run is
tests/appliance/detection/test_behaviour_fast.py.
"""

from __future__ import annotations

import dataclasses
import gc
import random
import tracemalloc
import weakref

import pytest

from appliance.detection.analysis_config import AnalysisConfig
from appliance.detection.analysis_config_holder import AnalysisConfigHolder
from appliance.detection.behaviour import BehaviourLayer
from appliance.model import Transport
from appliance.native.dpi import BehaviourCore
from tests.appliance.detection.behaviour_flows import NS, T0_NS, assert_same, eager_config, layers, random_flows


def test_random_flows_match_the_python_reference_under_small_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(21)
    configs = {i: eager_config(rng) for i in range(0, 900, 150)}
    holder = AnalysisConfigHolder(configs[0])
    fast, reference = layers(holder, 4, monkeypatch)
    found = assert_same(random_flows(seed=21, count=900, agents=6), holder, fast, reference, configs, state_every=10)
    assert found


def test_hostile_values_fail_or_pass_as_the_python_does() -> None:
    """Attacker-shaped records (huge or negative integers, odd types where ints belong, long ids) give the
    reference's answer or its exception type, and the layer keeps working afterwards."""
    holder = AnalysisConfigHolder(eager_config(random.Random(22)))
    fast, reference = layers(holder)
    base = random_flows(seed=22, count=1)[0]
    hostile = [dict(agent_id="x" * 100_000), dict(agent_id=""), dict(bytes_out=2**200), dict(bytes_out=-(2**70)),
               dict(remote_port=2**80), dict(remote_port=-1), dict(local_port=10**30), dict(first_ns=-(2**63) - 1),
               dict(last_ns=2**90), dict(packets_out=-3), dict(remote_ip=2**40), dict(bytes_out=1.5), dict(remote_port="443"),
               dict(last_ns=None), dict(agent_id=7), dict(transport=Transport.UDP, local_port=5, remote_port=2000)]
    for n, changes in enumerate(hostile):
        flow = dataclasses.replace(base, flow_id=f"hostile-{n}", **changes)
        outcomes = []
        for layer in (reference, fast):
            try:
                outcomes.append(("ok", [(d.detector, d.evidence) for d in layer.analyze(flow)]))
            except Exception as err:  # the reference's own failure is the expected one
                outcomes.append(("error", type(err)))
        assert outcomes[0] == outcomes[1], (changes, outcomes)
    ordinary = random_flows(seed=23, count=300)
    assert_same(ordinary, holder, fast, reference)


def test_a_long_run_holds_no_memory_past_its_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    holder = AnalysisConfigHolder(eager_config(random.Random(24)))
    fast, _ = layers(holder, 6, monkeypatch)
    flows = random_flows(seed=24, count=4000, agents=10)
    for flow in flows:  # warm: every table at its bound, every series full
        fast.analyze(flow)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for flow in flows:
            fast.analyze(flow)
        gc.collect()
        grown = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(before, "filename"))
    finally:
        tracemalloc.stop()
    assert grown < 64_000, grown  # a reference leaked per flow would be 4000 objects and more


def test_the_layer_is_collected_with_a_fleet_that_refers_back_to_it() -> None:
    class Fleet:
        def __init__(self) -> None:
            self.layer: BehaviourLayer | None = None

        def visited(self, destination: tuple[int, int], agent_id: str, seen_ns: int) -> None: ...

        def agents(self, destination: tuple[int, int], since_ns: int) -> set[str]:
            return set()

    fleet = Fleet()
    layer = BehaviourLayer(AnalysisConfigHolder(AnalysisConfig()), fleet)
    fleet.layer = layer
    for flow in random_flows(seed=25, count=50):
        layer.analyze(flow)
    gone = weakref.ref(layer)
    del layer, fleet
    gc.collect()
    assert gone() is None


def test_beacon_figures_refuse_what_is_not_a_series() -> None:
    assert BehaviourCore.beacon_figures([], 5.0) is None  # the Python raises on an empty series: it is its to raise
    assert BehaviourCore.beacon_figures([(T0_NS, 1), (T0_NS + NS, 1)], 0.0) == ()  # too few intervals
    assert BehaviourCore.beacon_figures([(T0_NS, 1), ("x", 1), (T0_NS + 2 * NS, 1), (T0_NS + 3 * NS, 1)], 0.0) is None
    assert BehaviourCore.beacon_figures([(T0_NS + i * NS, 1, 2) for i in range(6)], 0.0) is None
    with pytest.raises(TypeError):
        BehaviourCore.beacon_figures(5, 0.0)
    with pytest.raises(TypeError):
        BehaviourCore.beacon_figures([], "five")


def test_an_uninitialised_core_refuses_to_analyse() -> None:
    core = BehaviourCore.__new__(BehaviourCore)
    with pytest.raises(RuntimeError):
        core.analyze(random_flows(seed=26, count=1)[0])


def test_the_loop_over_many_flows_gives_what_the_reference_gives_flow_by_flow(monkeypatch: pytest.MonkeyPatch) -> None:
    """`analyze_many` (the pipeline's call) 100 flows at a time: the flagged flows' indexes in their list and their
    detections, as the reference flow by flow; the state alike after."""
    from tests.appliance.detection.behaviour_flows import as_dicts, state_of

    holder = AnalysisConfigHolder(eager_config(random.Random(25)))
    fast, reference = layers(holder, 8, monkeypatch)
    flows = random_flows(seed=25, count=1200, agents=6)
    got: dict[int, list[dict]] = {}
    for start in range(0, len(flows), 100):
        got.update((start + i, as_dicts(found)) for i, found in fast.analyze_many(flows[start:start + 100]))
    want = {i: found for i, flow in enumerate(flows) if (found := as_dicts(reference.analyze(flow)))}
    assert got == want and len(want) > 10
    assert state_of(fast) == state_of(reference)


class _Interrupting:
    """Not a flow: reading it raises what is not an Exception."""

    @property
    def agent_id(self) -> str:
        raise _Stop


class _Stop(BaseException):
    pass


def test_a_flow_the_loop_fails_on_goes_to_failed_inside_its_exception_and_the_loop_goes_on() -> None:
    import sys

    holder = AnalysisConfigHolder(eager_config(random.Random(26)))
    fast, _ = layers(holder)
    flows: list = random_flows(seed=26, count=20, agents=1)
    seen: list[tuple[object, object]] = []
    broken = object()  # no agent_id
    flows.insert(5, broken)
    fast.analyze_many(flows, lambda flow: seen.append((flow, sys.exc_info()[1])))
    assert len(seen) == 1 and seen[0][0] is broken and isinstance(seen[0][1], AttributeError)
    assert sys.exc_info() == (None, None, None)  # nothing left handled after the loop
    assert fast._volume  # the other flows were counted
    with pytest.raises(AttributeError):
        fast.analyze_many([broken])  # no `failed`: the caller's exception
    with pytest.raises(_Stop):
        fast.analyze_many([_Interrupting()], seen.append)  # not an Exception: never swallowed
    for wrong in ((tuple(flows),), (flows, None, None), ()):
        with pytest.raises(TypeError):
            fast.analyze_many(*wrong)


def test_the_loop_holds_no_memory_past_its_bounds_through_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    holder = AnalysisConfigHolder(eager_config(random.Random(27)))
    fast, _ = layers(holder, 6, monkeypatch)
    flows: list = random_flows(seed=27, count=2000, agents=10)
    flows[::5] = [object()] * len(flows[::5])  # one flow in five fails
    failures: list[int] = []
    fast.analyze_many(flows, lambda flow: failures.append(1))  # warm
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for _ in range(3):
            fast.analyze_many(flows, lambda flow: None)
        gc.collect()
        grown = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(before, "filename"))
    finally:
        tracemalloc.stop()
    assert len(failures) == 400
    assert grown < 64_000, grown  # a reference leaked per flow or per failure would be thousands of objects
