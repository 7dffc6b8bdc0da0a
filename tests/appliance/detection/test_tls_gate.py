"""The TLS detector's gate in C (appliance/native/tls_gate.h: whether a TCP flow can raise anything, the client
fingerprint's prevalence observed on the way) against the Python it replaced (tls_reference.gate_reference): the
same answer and the same prevalence state after every flow of a seeded random walk (fingerprints new and seen,
flows without a handshake on and off the TLS ports, SNIs backed or not, chains in clear, evictions at tiny caps,
thresholds that make fingerprints rare), and the same detections out of the whole pipeline on the bench corpus."""

from __future__ import annotations

import dataclasses
import random
from types import SimpleNamespace
from typing import Any

import pytest

from appliance.detection.analysis_config import AnalysisConfig
from appliance.detection.domains import RegisteredDomains
from appliance.detection.dpi.tls import FingerprintPrevalence, TlsAnalyzer
from appliance.detection.dpi.tls_cert import TrustAnchors
from appliance.detection.resolutions import ResolverCache
from appliance.model import DnsAnswer, DnsMessage, FlowRecord, Transport, ip_int
from appliance.native.dpi import tls_gate
from tests.appliance.detection.pipeline_run import pipeline_detections
from tests.appliance.detection.tls_reference import TlsAnalyzerReference, gate_reference

_NS = 1_000_000_000
_ADDRESSES = [f"198.51.100.{i}" for i in range(1, 7)]
_NAMES = ["a.example.com", "b.example.com", "cdn.example.net", "x.test"]


def _analyzer(resolver: ResolverCache, max_fingerprints: int, max_agents: int) -> TlsAnalyzer:
    analyzer = TlsAnalyzer(resolver, RegisteredDomains(), TrustAnchors([]))
    analyzer.prevalence = FingerprintPrevalence(max_fingerprints, max_agents)
    return analyzer


def _resolver(rng: random.Random) -> ResolverCache:
    resolver = ResolverCache()
    for agent in ("a1", "a2", "a3"):
        for address in rng.sample(_ADDRESSES, 3):
            name = rng.choice(_NAMES)
            answers = [DnsAnswer(name, 1, rng.choice([30, 300, 7200]), address)]
            resolver.observe(agent, DnsMessage(1, True, 0, name, 1, 1, answers, timestamp_ns=rng.randrange(0, 50) * _NS))
    return resolver


def _flow(rng: random.Random, now_ns: int) -> SimpleNamespace:
    return SimpleNamespace(
        transport=rng.choice([Transport.TCP] * 8 + [Transport.UDP]), packets_out=rng.choice([0] + [3] * 9),
        remote_port=rng.choice([443, 443, 8443, 80, 22]), agent_id=rng.choice(["a1", "a2", "a3", "a4"]), first_ns=now_ns,
        remote_ip=ip_int(rng.choice(_ADDRESSES)) if rng.random() < 0.9 else rng.choice(_ADDRESSES))


def _tls(rng: random.Random) -> tuple[Any, Any]:
    if rng.random() < 0.2:
        return None, None
    tls = SimpleNamespace(ja4=rng.choice(["", "t13d1516h2_aaa", "t13d1516h2_bbb", "t12d0909_ccc", "t13d_ddd", "t13d_eee"]),
                          certificates=rng.choice([[], [], [], ["der"]]))
    hello = None if rng.random() < 0.1 else SimpleNamespace(sni=rng.choice(["", *_NAMES, "unbacked.example.org"]))
    return tls, hello


@pytest.mark.parametrize("seed", range(6))
def test_the_gate_answers_as_the_python_it_replaced_and_keeps_the_same_prevalence(seed: int) -> None:
    rng = random.Random(seed)
    # Every other seed makes a fingerprint new to an agent rare at once, so that the rare path is walked too.
    eager = seed % 2 == 0
    config = AnalysisConfig.model_validate({"tls": {
        "rare_learning_s": 0.001 if eager else rng.choice([5.0, 3600.0]), "rare_min_handshakes": 1 if eager else rng.choice([2, 20]),
        "rare_max_fleet_agents": 5 if eager else rng.choice([0, 1]), "ports": [443, 8443]}})
    caps = rng.choice([(3, 2), (2, 1), (100, 64)])
    resolver_c, resolver_py = _resolver(random.Random(seed)), _resolver(random.Random(seed))
    native, reference = _analyzer(resolver_c, *caps), _analyzer(resolver_py, *caps)
    native.configure(config)
    answers = {"quiet": 0, "through": 0, "rare": 0}
    now_ns = 0
    for _ in range(3000):
        now_ns += rng.randrange(0, 4 * _NS)
        flow, (tls, hello) = _flow(rng, now_ns), _tls(rng)
        got = tls_gate(flow, tls, hello, native._gate)
        want = gate_reference(reference, flow, tls, hello, config)
        assert got == want
        assert native.prevalence._watched == reference.prevalence._watched
        assert native.prevalence._agents_of == reference.prevalence._agents_of
        assert list(native.prevalence._agents_of) == list(reference.prevalence._agents_of)  # the same eviction order
        answers["quiet" if got is None else "through"] += 1
        answers["rare"] += bool(got and got[0])
    assert answers["quiet"] > 300 and answers["through"] > 300  # both ways taken
    if eager:
        assert answers["rare"] > 20


def test_the_gate_refuses_a_state_that_is_not_its_own() -> None:
    flow = SimpleNamespace(transport=Transport.TCP, packets_out=1, remote_port=443, agent_id="a", first_ns=0, remote_ip=1)
    with pytest.raises(TypeError):
        tls_gate(flow, None, None, ())
    with pytest.raises(TypeError):
        tls_gate(flow, None, None)  # type: ignore[call-arg]


def _corpus_detections(flows: list[FlowRecord], reference: bool) -> tuple[list[Any], dict[str, Any]]:
    state: dict[str, Any] = {}

    def prepare(app: Any) -> None:
        if reference:
            app.detection.dpi.tls.__class__ = TlsAnalyzerReference

    def after(app: Any) -> None:
        prevalence = app.detection.dpi.tls.prevalence
        state.update(watched=dict(prevalence._watched), agents_of=dict(prevalence._agents_of))

    return pipeline_detections(flows, prepare, after), state


def test_the_pipeline_raises_the_same_detections_as_with_the_python_gate() -> None:
    from bench.pipeline_bench import corpus, finished_flows

    flows = finished_flows(corpus())
    got, got_state = _corpus_detections([dataclasses.replace(f, tls=None) for f in flows], reference=False)
    want, want_state = _corpus_detections([dataclasses.replace(f, tls=None) for f in flows], reference=True)
    assert got == want and got_state == want_state
    assert "dpi.tls.raw_ip" in {d.detector for d in got}  # the gate lets the raw-IP scenario through
    assert len(got_state["watched"]) >= 20  # the office agents' handshakes were observed
