"""Signature matching benchmark: µs per flow of `SignatureEngine.analyze` (lazy matching, matcher.py) against
the reference it replaced (every record built as a dict of every field, then matched:
tests/appliance/detection/signatures/reference.py), the shipped rules over the pipeline bench's corpus, in the
same run. Each round starts both engines afresh (empty memos, as after a start or a reload); the payload facts
are parsed beforehand, as the DPI layer leaves them for the signatures layer in the pipeline. Median of several
rounds; figures go to stdout and to var/bench/signatures.txt and var/bench/signatures.json.
"""

from __future__ import annotations

import datetime
import json
import logging
import statistics
import time
from typing import Any

from bench.pipeline_bench import OUT, ROOT, corpus, finished_flows

ROUNDS = 7


class _Parsed:
    """Each flow's payload facts, parsed once before timing (the pipeline's DPI layer parses them first)."""

    def __init__(self, flows: list[Any]) -> None:
        from appliance.detection.facts import FlowFacts

        parser = FlowFacts(tls_views=False)
        self._by_flow = {id(flow): parser.facts(flow) for flow in flows}

    def facts(self, flow: Any) -> Any:
        return self._by_flow[id(flow)]


def signature_costs(flows: list[Any]) -> dict[str, Any]:
    """µs per flow, lazy and reference, alternating within each round; and the detections of each."""
    from appliance.detection.analysis_config import AnalysisConfig
    from appliance.detection.analysis_config_holder import AnalysisConfigHolder
    from appliance.detection.domains import RegisteredDomains
    from appliance.detection.signatures.engine import SignatureEngine
    from tests.appliance.detection.signatures.reference import ReferenceEngine

    parsed = _Parsed(flows)
    costs: dict[str, list[float]] = {"lazy": [], "reference": []}
    detections: dict[str, int] = {}
    for _ in range(ROUNDS):
        for name, kind in (("lazy", SignatureEngine), ("reference", ReferenceEngine)):
            engine = kind(ROOT / "rules", AnalysisConfigHolder(AnalysisConfig()), parsed, RegisteredDomains())  # type: ignore[arg-type]
            assert not engine.reload()
            analyze = engine.analyze
            found = 0
            start = time.perf_counter()
            for flow in flows:
                found += len(analyze(flow))
            costs[name].append((time.perf_counter() - start) / len(flows) * 1e6)
            detections[name] = found
    lazy, reference = statistics.median(costs["lazy"]), statistics.median(costs["reference"])
    return {"lazy_us_per_flow": lazy, "reference_us_per_flow": reference, "ratio": lazy / reference,
            "detections": detections}


def main() -> None:
    logging.disable(logging.WARNING)
    flows = finished_flows(corpus())
    costs = signature_costs(flows)
    line = (f"signatures ({len(list((ROOT / 'rules').glob('*.yaml')))} shipped rules, {len(flows)} corpus flows): "
            f"lazy matching {costs['lazy_us_per_flow']:.2f} us per flow vs the reference {costs['reference_us_per_flow']:.2f} "
            f"(ratio {costs['ratio']:.2f}, same run, median of {ROUNDS}; detections {costs['detections']['lazy']} vs "
            f"{costs['detections']['reference']})")
    print(line, flush=True)
    if costs["detections"]["lazy"] != costs["detections"]["reference"]:
        raise SystemExit("the lazy engine and the reference disagree on the corpus")
    OUT.mkdir(parents=True, exist_ok=True)
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    (OUT / "signatures.txt").write_text(f"{when}\n{line}\n")
    figures = {"measured": when, "flows": len(flows), "rounds": ROUNDS,
               **{k: round(v, 3) if isinstance(v, float) else v for k, v in costs.items()}}
    (OUT / "signatures.json").write_text(json.dumps(figures, indent=1) + "\n")
