"""Signature matching benchmark: µs per flow of `SignatureEngine.analyze` (lazy matching, matcher.py; its DNS loop
in C, native/signature_scan.h) against the reference it replaced (every record built as a dict of every field, then matched:
tests/appliance/detection/signatures/reference.py), the shipped rules over the pipeline bench's corpus, in the
same run. Each round starts both engines afresh (empty memos, as after a start or a reload); the payload facts
are parsed beforehand, as the DPI layer leaves them for the signatures layer in the pipeline. Median of several
rounds; figures go to stdout and to var/bench/signatures.txt and var/bench/signatures.json. The same run also
times each flow by type (TLS: a TCP flow whose samples open a handshake record; DNS: a UDP flow with DNS messages),
each flow timed on its own (the timer's cost is in both engines' figures alike).
"""

from __future__ import annotations

import logging
import statistics
import time
from typing import Any

from bench import write_figures
from bench.pipeline_bench import ROOT, corpus, finished_flows

ROUNDS = 7


class _Parsed:
    """Each flow's payload facts, parsed once before timing (the pipeline's DPI layer parses them first)."""

    def __init__(self, flows: list[Any]) -> None:
        from appliance.detection.facts import FlowFacts

        parser = FlowFacts(tls_views=False)
        self._by_flow = {id(flow): parser.facts(flow) for flow in flows}

    def facts(self, flow: Any) -> Any:
        return self._by_flow[id(flow)]


def flow_type(flow: Any) -> str:
    """tls, dns or other: the two flow types issue 15's per-type figures are about."""
    if flow.protocol == 6 and any(p.payload[:1] == b"\x16" for p in flow.samples):
        return "tls"
    return "dns" if flow.protocol == 17 and flow.dns else "other"


def signature_costs(flows: list[Any]) -> dict[str, Any]:
    """µs per flow, lazy and reference, alternating within each round, in all and per flow type; and the
    detections of each."""
    from appliance.detection.analysis_config import AnalysisConfig
    from appliance.detection.analysis_config_holder import AnalysisConfigHolder
    from appliance.detection.domains import RegisteredDomains
    from appliance.detection.signatures.engine import SignatureEngine
    from tests.appliance.detection.signatures.reference import ReferenceEngine

    parsed = _Parsed(flows)
    typed = [(flow, flow_type(flow)) for flow in flows]
    counts = {kind: sum(1 for _, k in typed if k == kind) for kind in ("tls", "dns")}
    costs: dict[str, list[float]] = {"lazy": [], "reference": []}
    by_type: dict[tuple[str, str], list[float]] = {(name, kind): [] for name in costs for kind in counts}
    detections: dict[str, int] = {}
    clock = time.perf_counter
    for _ in range(ROUNDS):
        for name, engine_class in (("lazy", SignatureEngine), ("reference", ReferenceEngine)):
            engine = engine_class(ROOT / "rules", AnalysisConfigHolder(AnalysisConfig()), parsed, RegisteredDomains())  # type: ignore[arg-type]
            assert not engine.reload()
            analyze = engine.analyze
            found = 0
            start = clock()
            for flow in flows:
                found += len(analyze(flow))
            costs[name].append((clock() - start) / len(flows) * 1e6)
            detections[name] = found
            engine = engine_class(ROOT / "rules", AnalysisConfigHolder(AnalysisConfig()), parsed, RegisteredDomains())  # type: ignore[arg-type]
            assert not engine.reload()
            analyze = engine.analyze
            spent = dict.fromkeys(counts, 0.0)
            for flow, kind in typed:
                start = clock()
                analyze(flow)
                if kind in spent:
                    spent[kind] += clock() - start
            for kind, total in spent.items():
                by_type[name, kind].append(total / counts[kind] * 1e6)
    lazy, reference = statistics.median(costs["lazy"]), statistics.median(costs["reference"])
    per_type = {kind: {"flows": counts[kind], "lazy_us_per_flow": statistics.median(by_type["lazy", kind]),
                       "reference_us_per_flow": statistics.median(by_type["reference", kind])} for kind in counts}
    return {"lazy_us_per_flow": lazy, "reference_us_per_flow": reference, "ratio": lazy / reference,
            "detections": detections, "by_type": per_type}


def main() -> None:
    logging.disable(logging.WARNING)
    flows = finished_flows(corpus())
    costs = signature_costs(flows)
    line = (f"signatures ({len(list((ROOT / 'rules').glob('*.yaml')))} shipped rules, {len(flows)} corpus flows): "
            f"lazy matching {costs['lazy_us_per_flow']:.2f} us per flow vs the reference {costs['reference_us_per_flow']:.2f} "
            f"(ratio {costs['ratio']:.2f}, same run, median of {ROUNDS}; detections {costs['detections']['lazy']} vs "
            f"{costs['detections']['reference']})")
    line += "; per flow type, each flow timed: " + ", ".join(
        f"{kind} ({t['flows']} flows) {t['lazy_us_per_flow']:.2f} vs {t['reference_us_per_flow']:.2f}" for kind, t in costs["by_type"].items())
    print(line, flush=True)
    if costs["detections"]["lazy"] != costs["detections"]["reference"]:
        raise SystemExit("the lazy engine and the reference disagree on the corpus")
    figures = {"flows": len(flows), "rounds": ROUNDS,
               **{k: round(v, 3) if isinstance(v, float) else v for k, v in costs.items() if k != "by_type"},
               "by_type": {kind: {k: round(v, 3) if isinstance(v, float) else v for k, v in t.items()}
                           for kind, t in costs["by_type"].items()}}
    write_figures("signatures", [line], figures)
