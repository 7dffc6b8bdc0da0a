"""Seeded random DNS flows and the comparison of the C DNS detectors with their Python reference.

Used by tests/appliance/detection/test_dns_fast.py and tests/appliance/native/test_dns_windows.py (which
the ASan/UBSan run repeats). The flows aim at the corners of the accounting: unicode, empty, very long and
many-label names, local suffixes, xn-- labels, public suffix wildcards and exceptions, every rcode and the
record types tunnels favour, answers or none, timestamps that go backwards or are zero, flows longer than
an hour of flood buckets, and a few agents so that windows and bounds fill up.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from appliance.detection.analysis_config import AnalysisConfig
from appliance.detection.domains import RegisteredDomains
from appliance.detection.dpi.dga import NameScorer
from appliance.detection.dpi.dns import DnsAnalyzer
from appliance.detection.dpi.dga_signals import DgaSignals
from appliance.detection.dpi.dga_signals_reference import DgaSignalsReference
from appliance.detection.dpi.dga_words import WordModel
from appliance.detection.dpi.dns_reference import DnsAnalyzerReference
from appliance.model import Detection, DnsAnswer, DnsMessage, FlowRecord, Transport

_NS = 1_000_000_000
T0_NS = 1_700_000_000 * _NS
_SUFFIXES = ["com", "net", "co.uk", "github.io", "ck", "www.ck", "kobe.jp", "city.kobe.jp", "xn--p1ai", "рф",
             "local", "lan", "arpa", "in-addr.arpa", "home", "test", "zz"]
_WORDS = ["mail", "www", "api", "cdn", "login", "tunnel-example", "paypal", "xn--80ak6aa92e", "bücher", "ünï"]
_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789-"

_MODELS: dict[str, Any] = {}


def scorer() -> NameScorer:
    """The shipped name model, loaded once per test process (read-only after load)."""
    if "scorer" not in _MODELS:
        _MODELS["scorer"] = NameScorer.load()
    return _MODELS["scorer"]  # type: ignore[no-any-return]


def words() -> WordModel:
    if "words" not in _MODELS:
        _MODELS["words"] = WordModel.load(scorer())
    return _MODELS["words"]  # type: ignore[no-any-return]


def dga_analyzers(max_agents: int = 100_000, max_domains: int = 200_000,
                  max_per_agent: int = 256) -> tuple[DgaSignals, DgaSignalsReference]:
    """The C-backed DGA signals and their Python reference, with the same bounds and their own memos."""
    return (DgaSignals(RegisteredDomains(), words(), max_agents, max_domains, max_per_agent),
            DgaSignalsReference(RegisteredDomains(), words(), max_agents, max_domains, max_per_agent))


def analyzers(max_keys: int = 100_000, max_events: int = 4096) -> tuple[DnsAnalyzer, DnsAnalyzerReference]:
    """The C-backed analyzer and its Python reference, with the same bounds and their own memos."""
    return (DnsAnalyzer(RegisteredDomains(), scorer(), max_keys, max_events),
            DnsAnalyzerReference(RegisteredDomains(), scorer(), max_keys, max_events))


def as_dicts(found: list[Detection]) -> list[dict[str, Any]]:
    """Detections as dicts without their random ids."""
    out = []
    for detection in found:
        fields = asdict(detection)
        del fields["id"]
        out.append(fields)
    return out


def _label(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.3:
        return rng.choice(_WORDS)
    if kind < 0.35:
        return "".join(rng.choice("äöü€漢字ß") for _ in range(rng.randint(1, 6)))
    if kind < 0.4:
        return "xn--" + "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(1, 12)))
    if kind < 0.45:
        return "".join(rng.choice(_ALPHABET) for _ in range(63))
    return "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(1, 30)))


def random_name(rng: random.Random, tunnels: list[str]) -> str:
    kind = rng.random()
    if kind < 0.03:
        return ""
    if kind < 0.06:
        return rng.choice(["localhost", "wpad", "ünïcode", "a"])  # no dot
    if kind < 0.08:
        return "..".join(_label(rng) for _ in range(3))  # empty labels
    if kind < 0.1:
        return ".".join(_label(rng) for _ in range(rng.randint(8, 30)))[:255]  # many labels, long
    if kind < 0.45:  # a tunnel: long random subdomains under a few domains
        sub = ".".join("".join(rng.choice(_ALPHABET) for _ in range(rng.randint(20, 63))) for _ in range(rng.randint(1, 3)))
        return sub + "." + rng.choice(tunnels)
    labels = [_label(rng) for _ in range(rng.randint(0, 3))]
    return ".".join([*labels, _label(rng), rng.choice(_SUFFIXES)]).strip(".")


def random_flows(seed: int, count: int, agents: int = 5) -> list[FlowRecord]:
    """`count` seeded DNS flows (remote port 53) of `agents` agents, in a stream whose clock drifts and jumps."""
    rng = random.Random(seed)
    tunnels = ["t.tunnel-example.net", "x.co.uk", "exfil.github.io", "dns.zz"]
    clock = T0_NS
    flows = []
    for i in range(count):
        clock += rng.choice([0, 10**6, 10**8, _NS, 20 * _NS, 400 * _NS])
        if rng.random() < 0.05:
            clock = max(0, clock - rng.randint(1, 900) * _NS)  # the clock goes backwards
        first = clock if rng.random() > 0.01 else 0
        last = first + rng.choice([0, 10**6, _NS, 15 * _NS, 5000 * _NS])  # 5000 s: more than 360 buckets
        messages = []
        for _ in range(rng.choice([0, 1, 2, 2, 2, 6, 40])):
            ts = rng.choice([0, first, last, rng.randint(first, last), max(0, first - 700 * _NS)])
            response = rng.random() < 0.45
            # An answer mostly repeats its query's name (the same text, another object, as ingestion decodes it).
            repeat = response and messages and rng.random() < 0.6
            name = "".join(list(messages[-1].qname)) if repeat else random_name(rng, tunnels)
            answers = ([DnsAnswer(name, 1, rng.randint(0, 86400), "1.2.3.4")] if response and rng.random() < 0.6 else [])
            messages.append(DnsMessage(rng.randint(0, 65535), response, rng.choice([0, 0, 2, 3, 3]), name,
                                       rng.choice([1, 5, 10, 16, 28, 65535]), 1, answers, False, ts))
        flows.append(FlowRecord(f"f{seed}-{i}", f"agent-{rng.randrange(agents)}", 17, Transport.UDP, 167772161 + rng.randrange(agents),
                                30000 + i % 30000, 167772213, 53, first, last, packets_out=rng.choice([0, 1, 2, 50, 4000, 10**6]),
                                dns=messages))
    return flows


def eager_config(rng: random.Random) -> AnalysisConfig:
    """Thresholds low enough that every DNS detector fires often on random flows, drawn at random."""
    return AnalysisConfig.model_validate({
        "detectors": {"report_interval_s": rng.choice([1.0, 30.0, 120.0])},
        "dns_tunneling": {"window_s": rng.choice([30.0, 300.0]), "min_queries": rng.randint(1, 6),
                          "min_unique_subdomains": rng.randint(1, 4), "min_mean_subdomain_length": rng.choice([1.0, 10.0, 24.0]),
                          "min_label_entropy": rng.choice([0.0, 2.0, 3.2]), "min_name_bytes": rng.choice([1, 100, 600])},
        "dga": {"window_s": rng.choice([60.0, 600.0]), "name_threshold": rng.choice([0.1, 0.3, 0.5]),
                "burst_window_s": rng.choice([30.0, 300.0]), "burst_min_domains": rng.randint(1, 4),
                "burst_baseline_factor": rng.choice([1.0, 3.0]), "common_domain_agents": rng.randint(2, 4),
                "prevalence_window_s": rng.choice([60.0, 3600.0]), "lexical_min_domains": rng.randint(1, 3),
                "lexical_min_share": rng.choice([0.0, 0.6]),
                "min_suspicious_domains": rng.randint(1, 4), "min_suspicious_share": rng.choice([0.0, 0.3]),
                "nxdomain_min_responses": rng.randint(1, 5), "nxdomain_ratio": rng.choice([0.1, 0.5])},
        "dns_flood": {"bucket_s": rng.choice([1.0, 10.0]), "absolute_qps": rng.choice([5.0, 50.0]),
                      "baseline_z": rng.choice([0.5, 3.0]), "baseline_min_qps": rng.choice([0.1, 10.0]),
                      "warmup_buckets": rng.randint(1, 5)},
    })


def window_state(analyzer: DnsAnalyzer) -> dict[tuple[str, str], tuple[Any, ...]]:
    """Everything a judge can read of every window, comparable between the two implementations."""
    return {key: (w.queries, w.length_sum, w.entropy_sum, w.suspicious_qtypes, w.unique_bytes, dict(w.subdomains),
                  list(w.subdomains), list(w.flow_ids), w.first_event_ns if w.queries else None)
            for key, w in analyzer._windows.items()}


def agent_state(analyzer: DnsAnalyzer) -> dict[str, tuple[Any, ...]]:
    return {agent_id: (list(a.domains.items()), a.suspicious, a.threshold, a.answered, a.nx_count, list(a.buckets.items()),
                       a.top_bucket, a.base_n, a.base_mean, a.base_m2, list(a.flow_ids))
            for agent_id, a in analyzer._agents.items()}


def dns_state(analyzer: DnsAnalyzer) -> tuple[Any, ...]:
    return window_state(analyzer), agent_state(analyzer)


def _compare(fast: Any, reference: Any, state: Callable[[Any], Any], flows: list[FlowRecord],
             configs: dict[int, AnalysisConfig] | None, state_every: int) -> int:
    """Feed both detectors every flow (switching config at the given flow indexes); the same detections after
    every flow, the same state every `state_every` flows and at the end. Returns how many detections."""
    config = AnalysisConfig()
    found = 0
    for i, flow in enumerate(flows):
        config = (configs or {}).get(i, config)
        got, want = as_dicts(fast.analyze(flow, config)), as_dicts(reference.analyze(flow, config))
        assert got == want, f"flow {i} ({flow.flow_id}) differs"
        found += len(got)
        if (state_every and i % state_every == 0) or i == len(flows) - 1:
            assert state(fast) == state(reference), f"state differs after flow {i}"
    return found


def assert_same(flows: list[FlowRecord], configs: dict[int, AnalysisConfig] | None = None, max_keys: int = 100_000,
                max_events: int = 4096, state_every: int = 0) -> int:
    """`DnsAnalyzer` against its reference on `flows` (see `_compare`)."""
    return _compare(*analyzers(max_keys, max_events), dns_state, flows, configs, state_every)


def dga_state(signals: DgaSignals) -> tuple[Any, ...]:
    """What the DGA judges read: every agent's failures, counts, TTLs and baseline, the askers, the population."""
    agents = {agent_id: (list(a.failed.items()), a.window_start, a.baseline, a.windows, a.answers, a.failures,
                         a.last_share, list(a.ttls)) for agent_id, a in signals._agents.items()}
    askers = [(d, e[0], sorted(e[1])) for d, e in signals._askers.items()]
    return agents, askers, signals._population_share, signals._population_windows


def assert_same_dga(flows: list[FlowRecord], configs: dict[int, AnalysisConfig] | None = None,
                    bounds: tuple[int, int, int] = (100_000, 200_000, 256), state_every: int = 0) -> int:
    """`DgaSignals` against its reference on `flows` (see `_compare`)."""
    return _compare(*dga_analyzers(*bounds), dga_state, flows, configs, state_every)
