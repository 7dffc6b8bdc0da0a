"""Baselines checkpointed by one analyzer and restored by another judge what follows exactly as the
first would have: the volume baseline (with its CUSUM) and the beaconing series survive a failover."""

from __future__ import annotations

import json
from typing import Any

import pytest

from appliance.detection.analysis_config import AnalysisConfig
from appliance.detection.analysis_config_holder import AnalysisConfigHolder
from appliance.detection.behaviour import BehaviourLayer
from appliance.model import FlowRecord, Transport

NS = 1_000_000_000
AGENT = "agent-under-test"


def flow(n: int, t_s: float, remote_ip: int, remote_port: int, bytes_out: int) -> FlowRecord:
    first = int(t_s * NS)
    return FlowRecord(f"{n:020x}", AGENT, 6, Transport.TCP, 0x0A000105, 40_000 + n % 20_000, remote_ip, remote_port,
                      first, first + NS, 10, 10, bytes_out, 1000, bytes_out, 500, 0x1B, 0, "", "tcp_close", [], [])


def history() -> list[FlowRecord]:
    """30 minutes of ordinary uploads, and a beacon every 60 s to one address."""
    flows = [flow(i, i * 30.0, 0x22000000 + i % 7, 443, 200_000 + (i * 7919) % 50_000) for i in range(60)]
    flows += [flow(1000 + i, i * 60.0 + 5, 0xC6336414, 8443, 512) for i in range(6)]
    return sorted(flows, key=lambda f: f.first_ns)


def after() -> list[FlowRecord]:
    """What follows: the beacon goes on and a 300 MB upload stands out of the baseline."""
    flows = [flow(2000 + i, 1800.0 + i * 60.0 + 5, 0xC6336414, 8443, 512) for i in range(6)]
    flows.append(flow(3000, 1900.0, 0xC6336415, 9000, 300_000_000))
    flows += [flow(3001 + i, 1960.0 + i * 60, 0x22000001, 443, 200_000) for i in range(3)]
    return sorted(flows, key=lambda f: f.first_ns)


def judged(layer: BehaviourLayer, flows: list[FlowRecord]) -> list[tuple[str, str, Any]]:
    out = []
    for f in flows:
        for d in layer.analyze(f):
            out.append((d.detector, d.indicator, d.evidence))
    return out


def test_restored_baselines_judge_what_follows_as_the_original_would() -> None:
    config = AnalysisConfigHolder(AnalysisConfig())
    original = BehaviourLayer(config)
    judged(original, history())
    state = json.loads(json.dumps(original.snapshot({AGENT})))  # through JSON, as in Redis
    restored = BehaviourLayer(config)
    restored.restore(AGENT, state[AGENT])
    fresh = BehaviourLayer(config)

    expected = judged(original, after())
    assert {d for d, _, _ in expected} >= {"behaviour.volume", "behaviour.beaconing"}
    assert judged(restored, after()) == expected
    assert {d for d, _, _ in judged(fresh, after())} == set()  # without the checkpoint: nothing to judge against


@pytest.mark.parametrize("state", [{}, {"volume": {"stats": "x"}, "series": []}, {"volume": None, "series": [[1, 2]]},
                                   {"volume": None, "series": [["a", 443, []]]},
                                   {"volume": {"stats": [2, 1.0, 0.5, 1.0], "reference": [0, 0, 0, 0], "bucket": 3, "total": 5,
                                               "by_remote": [], "flow_ids": [], "cusum": 0, "run_buckets": 0,
                                               "run_first_ns": 0, "run_max_z": 0, "run_by_remote": []},
                                    "series": [[1, "port", []]]}])
def test_an_unreadable_checkpoint_is_refused_not_half_restored(state: dict[str, Any]) -> None:
    layer = BehaviourLayer(AnalysisConfigHolder(AnalysisConfig()))
    with pytest.raises((ValueError, TypeError, KeyError)):
        layer.restore(AGENT, state)
    assert layer.snapshot({AGENT}) == {AGENT: {"volume": None, "series": []}}
