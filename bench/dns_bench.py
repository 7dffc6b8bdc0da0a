"""DNS detectors benchmark: the C accounting against its Python references, in the same run.

On the DNS flows of the pipeline bench's scenario corpus (3,483 of its 7,907 flows), per flow of the whole
corpus as the pipeline bench counts: `DnsAnalyzer` + `DgaSignals` (loops in appliance/native/dns_windows.h)
against `DnsAnalyzerReference` + `DgaSignalsReference` (the loops and judges in Python as they were), every
round with new memos, as a new analysis process starts; then the two helpers every new name pays for:
`RegisteredDomains.split` (C) against the public suffix library on the corpus's distinct names, and the name
scorer's per-character work (C) against `label_features_reference`, and its whole miss path, a new label's
NameFeatures (`NameScorer.features`, native/name_model.h) against `NameScorer.features_reference`. Medians of several rounds; figures go to
stdout and to var/bench/dns.txt and var/bench/dns.json.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable
from typing import Any

from bench import write_figures
from bench.pipeline_bench import corpus, finished_flows

ROUNDS = 5


def _median_s(run: Callable[[], object], rounds: int = ROUNDS) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def detector_costs(flows: list, corpus_flows: int) -> dict[str, float]:
    """µs per corpus flow of both DNS detectors, C and Python reference, fresh state and memos each round."""
    from appliance.detection.analysis_config import AnalysisConfig
    from appliance.detection.domains import RegisteredDomains
    from appliance.detection.dpi.dga import NameScorer
    from appliance.detection.dpi.dga_signals import DgaSignals
    from appliance.detection.dpi.dga_signals_reference import DgaSignalsReference
    from appliance.detection.dpi.dga_words import WordModel
    from appliance.detection.dpi.dns import DnsAnalyzer
    from appliance.detection.dpi.dns_reference import DnsAnalyzerReference

    config = AnalysisConfig()
    out: dict[str, float] = {}
    for name, dns_type, dga_type in (("c", DnsAnalyzer, DgaSignals), ("python", DnsAnalyzerReference, DgaSignalsReference)):
        times = []
        for _ in range(ROUNDS):
            scorer = NameScorer.load()  # new models and memos, as a new analysis process has
            words = WordModel.load(scorer)
            domains = RegisteredDomains()
            dns, dga = dns_type(domains, scorer), dga_type(domains, words)
            start = time.perf_counter()
            for flow in flows:
                dns.analyze(flow, config)
                dga.analyze(flow, config)
            times.append(time.perf_counter() - start)
        out[name] = statistics.median(times) / corpus_flows * 1e6
    return out


def helper_costs(flows: list) -> dict[str, dict[str, float]]:
    """µs per name of the registered-domain split (no memo), per label of the scorer's character work and of
    its miss path (a new label's features, the memo cleared each round)."""
    from appliance.detection.domains import RegisteredDomains
    from appliance.detection.dpi.dga import NameScorer, label_features, label_features_reference

    names = list(dict.fromkeys(m.qname for f in flows for m in f.dns if m.qname))
    domains = RegisteredDomains()

    def split_c() -> None:
        domains.memo.clear()
        for n in names:
            domains.split(n)

    def split_python() -> None:
        for n in names:
            domains.split_reference(n)

    scorer = NameScorer.load()
    labels = list(dict.fromkeys(domains.split(n)[1] for n in names))
    model: Any = (scorer._logp, scorer._context_floor, scorer._unseen)

    def features(method: Callable[[str], object]) -> Callable[[], None]:
        def run() -> None:
            scorer.memo.clear()
            for lb in labels:
                method(lb)
        return run

    return {
        "split_per_name": {"c": _median_s(split_c) / len(names) * 1e6, "python": _median_s(split_python) / len(names) * 1e6,
                           "names": len(names)},
        "label_features_per_label": {
            "c": _median_s(lambda: [label_features(lb, *model) for lb in labels]) / len(labels) * 1e6,
            "python": _median_s(lambda: [label_features_reference(lb, *model) for lb in labels]) / len(labels) * 1e6,
            "labels": len(labels)},
        "features_per_new_label": {
            "c": _median_s(features(scorer.features)) / len(labels) * 1e6,
            "python": _median_s(features(scorer.features_reference)) / len(labels) * 1e6,
            "labels": len(labels)},
    }


def main() -> None:
    logging.disable(logging.WARNING)
    from appliance.app import tune_garbage_collector

    all_flows = finished_flows(corpus())
    flows = [f for f in all_flows if f.dns]
    tune_garbage_collector()  # the collector policy the analysis process runs with
    detectors = detector_costs(flows, len(all_flows))
    helpers = helper_costs(flows)
    split, features = helpers["split_per_name"], helpers["label_features_per_label"]
    new_label = helpers["features_per_new_label"]
    lines = [
        f"corpus: {len(all_flows)} flows, {len(flows)} with DNS messages",
        f"DnsAnalyzer + DgaSignals per corpus flow: C {detectors['c']:.2f} us vs Python reference {detectors['python']:.2f} us "
        f"({detectors['python'] / detectors['c']:.1f}x; new memos each round, median of {ROUNDS})",
        f"registered-domain split per new name ({split['names']:.0f} names): C {split['c']:.2f} us vs publicsuffixlist "
        f"{split['python']:.2f} us ({split['python'] / split['c']:.1f}x)",
        f"name scorer per-character work per label ({features['labels']:.0f} labels): C {features['c']:.2f} us vs Python "
        f"{features['python']:.2f} us ({features['python'] / features['c']:.1f}x)",
        f"name scorer per new label, features and memo ({new_label['labels']:.0f} labels): C {new_label['c']:.2f} us vs "
        f"Python {new_label['python']:.2f} us ({new_label['python'] / new_label['c']:.1f}x)",
    ]
    for line in lines:
        print(line, flush=True)
    figures = {"flows": len(all_flows), "dns_flows": len(flows), "rounds": ROUNDS,
               "detectors_us_per_flow": {k: round(v, 3) for k, v in detectors.items()},
               "split_us_per_name": {k: round(v, 3) for k, v in split.items()},
               "label_features_us_per_label": {k: round(v, 3) for k, v in features.items()},
               "features_us_per_new_label": {k: round(v, 3) for k, v in new_label.items()}}
    write_figures("dns", lines, figures)


if __name__ == "__main__":
    main()
