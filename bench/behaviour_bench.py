"""Behaviour layer benchmark: the C accounting against its Python reference, in the same run.

On the flows of the pipeline bench's scenario corpus, per flow: `BehaviourLayer` (bookkeeping in
appliance/native/behaviour_tally.h, judges in Python) against `BehaviourLayerReference` (the layer as it was,
all Python), a new layer each round as a new analysis process has; then the beacon scores of one 64-connection
series (`series_scores`, figures in C) against `beacon_scores`. Medians of several rounds; the detections of
both must be the same. Figures go to stdout and to var/bench/behaviour.txt and var/bench/behaviour.json.
"""

from __future__ import annotations

import logging
import random
import statistics
import time
from collections import deque

from bench import write_figures
from bench.pipeline_bench import corpus, finished_flows

ROUNDS = 7
NS = 1_000_000_000


def layer_costs(flows: list) -> tuple[dict[str, float], dict[str, int]]:
    """µs per flow of each layer (new layer each round) and the detections each gave in its last round."""
    from appliance.detection.analysis_config import AnalysisConfig
    from appliance.detection.analysis_config_holder import AnalysisConfigHolder
    from appliance.detection.behaviour import BehaviourLayer
    from appliance.detection.behaviour_reference import BehaviourLayerReference

    costs: dict[str, float] = {}
    found: dict[str, int] = {}
    for name, layer_type in (("c", BehaviourLayer), ("python", BehaviourLayerReference)):
        times = []
        for _ in range(ROUNDS):
            analyze = layer_type(AnalysisConfigHolder(AnalysisConfig())).analyze
            detections = 0
            start = time.perf_counter()
            for flow in flows:
                detections += len(analyze(flow))
            times.append(time.perf_counter() - start)
        costs[name] = statistics.median(times) / len(flows) * 1e6
        found[name] = detections
    return costs, found


def score_costs() -> dict[str, float]:
    """µs per call of the beacon scores of a jittered 64-connection series."""
    from appliance.detection.behaviour import beacon_scores, series_scores

    rng = random.Random(1)
    t, series = 1_700_000_000 * NS, deque(maxlen=64)
    for _ in range(64):
        t += int(60 * NS * rng.uniform(0.9, 1.1))
        series.append((t, rng.randrange(400, 1400)))
    starts, sizes = [s for s, _ in series], [b for _, b in series]
    assert series_scores(series, 5.0) == beacon_scores(starts, sizes, 5.0)
    calls = 2000
    out = {}
    for name, run in (("c", lambda: series_scores(series, 5.0)), ("python", lambda: beacon_scores(starts, sizes, 5.0))):
        times = []
        for _ in range(ROUNDS):
            start = time.perf_counter()
            for _ in range(calls):
                run()
            times.append(time.perf_counter() - start)
        out[name] = statistics.median(times) / calls * 1e6
    return out


def main() -> None:
    logging.disable(logging.WARNING)
    from appliance.app import tune_garbage_collector

    flows = finished_flows(corpus())
    tune_garbage_collector()  # the collector policy the analysis process runs with
    layers, found = layer_costs(flows)
    if found["c"] != found["python"]:
        raise SystemExit(f"the layers disagree: {found}")
    scores = score_costs()
    lines = [
        f"corpus: {len(flows)} flows, {found['c']} behaviour detections from each layer",
        f"BehaviourLayer per flow: C {layers['c']:.2f} us vs Python reference {layers['python']:.2f} us "
        f"({layers['c'] / layers['python']:.2f} of it; a new layer each round, median of {ROUNDS})",
        f"beacon scores of a 64-connection series: C figures {scores['c']:.2f} us vs Python {scores['python']:.2f} us "
        f"({scores['python'] / scores['c']:.1f}x)",
    ]
    for line in lines:
        print(line, flush=True)
    figures = {"flows": len(flows), "detections": found["c"], "rounds": ROUNDS,
               "layer_us_per_flow": {k: round(v, 3) for k, v in layers.items()},
               "ratio": round(layers["c"] / layers["python"], 3),
               "beacon_scores_us_per_call": {k: round(v, 3) for k, v in scores.items()}}
    write_figures("behaviour", lines, figures)


if __name__ == "__main__":
    main()
