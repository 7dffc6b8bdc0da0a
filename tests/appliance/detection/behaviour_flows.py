"""Flows and comparisons for the behaviour layer's differential tests: `BehaviourLayer` (accounting in C,
appliance/native/behaviour_tally.h) against `BehaviourLayerReference` (all Python)."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest

from appliance.detection import behaviour, behaviour_reference
from appliance.detection.analysis_config import AnalysisConfig
from appliance.detection.analysis_config_holder import AnalysisConfigHolder
from appliance.detection.behaviour import BehaviourLayer
from appliance.detection.behaviour_reference import BehaviourLayerReference
from appliance.model import Detection, FlowRecord, Transport

NS = 1_000_000_000
T0_NS = 1_700_000_000 * NS
Layer = BehaviourLayer | BehaviourLayerReference


def as_dicts(detections: list[Detection]) -> list[dict[str, Any]]:
    out = []
    for d in detections:
        row = dataclasses.asdict(d)
        del row["id"]  # a fresh uuid4 per detection
        out.append(row)
    return out


class MemoryFleet:
    """FleetPrevalence in memory, recording what the layer told it."""

    def __init__(self, others: dict[tuple[int, int], set[str]]) -> None:
        self.others = others  # what other analyzers' agents reached
        self.calls: list[tuple[Any, ...]] = []

    def visited(self, destination: tuple[int, int], agent_id: str, seen_ns: int) -> None:
        self.calls.append(("visited", destination, agent_id, seen_ns))

    def agents(self, destination: tuple[int, int], since_ns: int) -> set[str]:
        self.calls.append(("agents", destination, since_ns))
        return set(self.others.get(destination, ()))


def layers(holder: AnalysisConfigHolder, max_keys: int | None = None,
           monkeypatch: pytest.MonkeyPatch | None = None) -> tuple[BehaviourLayer, BehaviourLayerReference]:
    if max_keys is not None and monkeypatch is not None:
        monkeypatch.setattr(behaviour, "_MAX_KEYS", max_keys)  # read by BehaviourLayer() when it is built
        monkeypatch.setattr(behaviour_reference, "_MAX_KEYS", max_keys)
    return BehaviourLayer(holder), BehaviourLayerReference(holder)


def state_of(layer: Layer) -> dict[str, Any]:
    return {"volume": {a: dataclasses.asdict(v) | {"flow_ids": list(v.flow_ids)} for a, v in layer._volume.items()},
            "series": [(k, list(s), s.maxlen) for k, s in layer._series.items()],
            "visitors": layer._visitors, "throttle": layer._throttle._last,
            "snapshot": layer.snapshot(set(layer._volume) | {k[0] for k in layer._series})}


def assert_same(flows: list[FlowRecord], holder: AnalysisConfigHolder, fast: BehaviourLayer,
                reference: BehaviourLayerReference, configs: dict[int, AnalysisConfig] | None = None,
                state_every: int = 0) -> dict[str, int]:
    """Feeds both layers; returns how many detections of each detector they gave (alike)."""
    found: dict[str, int] = {}
    for i, flow in enumerate(flows):
        if configs and i in configs:
            holder.replace(configs[i])
        got = as_dicts(fast.analyze(flow))
        assert got == as_dicts(reference.analyze(flow)), f"flow {i} ({flow}) differs"
        for d in got:
            found[d["detector"]] = found.get(d["detector"], 0) + 1
        if state_every and i % state_every == 0:
            assert state_of(fast) == state_of(reference), f"state after flow {i} differs"
    assert state_of(fast) == state_of(reference)
    return found


def eager_config(rng: random.Random) -> AnalysisConfig:
    """Thresholds low enough that every judge fires on a few minutes of random flows."""
    return AnalysisConfig.model_validate({
        "detectors": {"report_interval_s": rng.choice([1.0, 30.0, 120.0])},
        "volume": {"bucket_s": rng.choice([5.0, 10.0, 60.0]), "z_threshold": rng.choice([0.5, 1.0, 3.0]),
                   "warmup_buckets": rng.randint(1, 6), "min_bytes": rng.choice([1, 1000, 100_000]),
                   "ema_alpha": rng.choice([0.1, 0.5, 1.0]), "cusum": rng.random() < 0.8,
                   "cusum_k": rng.choice([0.0, 0.5, 2.0]), "cusum_h": rng.choice([0.5, 2.0, 8.0]),
                   "cusum_min_bytes": rng.choice([1, 10_000, 1_000_000])},
        "beaconing": {"min_connections": rng.randint(3, 8), "max_cv": rng.choice([0.0, 0.15, 0.5, 2.0]),
                      "min_interval_s": rng.choice([0.0, 1.0, 5.0]), "history": rng.choice([4, 9, 64]),
                      "ignore_ports": rng.choice([[], [53, 123], [443, 8443, 7]]),
                      "common_destination_agents": rng.choice([0, 2, 3, 5]),
                      "prevalence_window_s": rng.choice([30.0, 600.0, 3600.0])},
    })


def random_flows(seed: int, count: int, agents: int = 6) -> list[FlowRecord]:
    """Few agents and destinations (long series): periodic beats with jitter, bursts, missed beats, time going
    backwards, zero or negative, huge byte counts (past int64 too), every transport, ignored and server-side ports."""
    rng = random.Random(seed)
    names = [f"agent-{rng.randrange(10**6)}-{i}" for i in range(agents)] + ["", "\u00e9\u4e2d"]
    destinations = [(rng.choice([0x0A000001, 0xC6336414, 0x22000000 + i, 0xFFFFFFFF - i]), rng.choice([443, 8443, 53, 7, 9000, 80]))
                    for i in range(5)]
    period = {(a, d): rng.choice([1, 5, 30, 60, 61]) * NS for a in names for d in destinations}
    clock = {(a, d): T0_NS + rng.randrange(60) * NS for a in names for d in destinations}
    flows = []
    for n in range(count):
        agent, destination = rng.choice(names), rng.choice(destinations)
        key = (agent, destination)
        roll = rng.random()
        if roll < 0.05:
            first = clock[key] - rng.randrange(3600) * NS  # late, out of order
        elif roll < 0.07:
            # Zero, before the epoch or past int64 (a broken clock): the C takes Python's arithmetic for these.
            first = rng.choice([0, 0, -rng.randrange(10**12), 2**64 - rng.randrange(10**12)])
        elif roll < 0.17:
            first = clock[key] + rng.randrange(NS // 2)  # a burst
        else:
            beats = 2 if rng.random() < 0.1 else 1  # a missed beat
            clock[key] += beats * period[key] + int(period[key] * rng.uniform(-0.1, 0.1))
            first = clock[key]
        size = rng.choice([0, 512, 900, rng.randrange(10**6), rng.randrange(10**9), 2**63 - 1, 2**64 + rng.randrange(99),
                           10**30])
        local_port = rng.choice([40_000 + n % 20_000, 22, 123, 53])
        transport = rng.choice([Transport.TCP] * 6 + [Transport.UDP] * 3 + [Transport.ICMP, Transport.OTHER])
        flows.append(FlowRecord(f"{seed:04x}{n:016x}", agent, 6, transport, 0x0A000105, local_port, destination[0],
                                destination[1], first, first + rng.choice([0, NS, 70 * NS]),
                                rng.choice([0, 1, 10, 10, 10]), 10, size, 1000, size, 500, 0x1B, 0, "", "tcp_close", [], []))
    return flows
