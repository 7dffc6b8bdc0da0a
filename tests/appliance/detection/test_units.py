"""Detector and correlation behaviour on real objects (no gRPC): the math the docs promise."""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path

import pytest

from appliance.detection.alert_channel import AlertChannel
from appliance.detection.alert_store import AlertStore
from appliance.detection.analysis_config import AnalysisConfig, CorrelationConfig
from appliance.detection.analysis_config_holder import AnalysisConfigHolder
from appliance.detection.behaviour import beacon_scores
from appliance.detection.correlation import Correlator, combine
from appliance.detection.database import DetectionDatabase
from appliance.detection.domains import RegisteredDomains
from appliance.detection.dpi.dga import NameScorer
from appliance.detection.dpi.dga_words import WordModel
from appliance.detection.dpi.icmp import is_ping_pattern
from appliance.model import Category, Detection, Severity
from tests.appliance.detection import dga_families
from tests.appliance.detection.scenarios import BENIGN_SITES

NS = 1_000_000_000


def det(detector: str, confidence: float, t_s: float, indicator: str = "evil.example", agent: str = "a1",
        category: Category = Category.DNS_TUNNELING, severity: Severity = Severity.MEDIUM) -> Detection:
    ns = int(t_s * NS)
    return Detection(detector, category, confidence, severity, agent, indicator, {"reason": "test"}, ["f1"], ns, ns)


@pytest.fixture
def correlation(tmp_path: Path):
    db = DetectionDatabase(tmp_path / "d.db")
    store = AlertStore(db)
    channel = AlertChannel()
    events: list[tuple[str, str]] = []
    channel.subscribe(store.save)
    channel.subscribe(lambda event, alert: events.append((event, alert.id)))
    correlator = Correlator(AnalysisConfigHolder(AnalysisConfig()), store, channel)
    yield correlator, store, events
    db.close()


def test_combined_probability_decay_and_diversity_bonus():
    c = CorrelationConfig()
    a, b = det("x", 0.5, 0), det("y", 0.5, 0)
    assert combine([(a, 0.5)], c) == pytest.approx(0.5)
    assert combine([(a, 0.5), (b, 0.5)], c) == pytest.approx(0.75 * 1.1)
    many = [(det(f"d{i}", 0.1, 0), 0.1) for i in range(6)]
    assert combine(many, c) == pytest.approx((1 - 0.9 ** 6) * 1.3)  # five extra detectors, bonus capped at +30%
    assert combine([(a, 0.99), (b, 0.99)], c) == 0.99


def test_a_single_signal_never_alerts_and_two_do(correlation):
    correlator, store, events = correlation
    assert correlator.correlate([det("dpi.x", 0.95, 0)]) == 0
    assert store.query() == []
    assert correlator.correlate([det("dpi.y", 0.5, 10)]) == 1
    (alert,) = store.query()
    assert alert.confidence > 0.9 and alert.severity == Severity.HIGH  # escalated from Medium above 0.9
    assert events == [("opened", alert.id)]


def test_weak_pairs_and_old_detections_do_not_alert(correlation):
    correlator, store, _ = correlation
    correlator.correlate([det("dpi.x", 0.3, 0), det("dpi.x", 0.3, 1)])  # P = 0.51 < 0.6
    assert store.query() == []
    correlator.correlate([det("dpi.a", 0.7, 1000)])
    correlator.correlate([det("dpi.b", 0.7, 1000 + 301)])  # the first fell out of the 5-minute window
    assert store.query() == []
    correlator.correlate([det("dpi.c", 0.7, 2000)])
    correlator.correlate([det("dpi.d", 0.7, 2000 + 299)])  # still inside, decayed by ~half
    (alert,) = store.query()
    assert 0.6 <= alert.confidence < 0.9


def test_an_open_alert_is_updated_and_a_closed_one_is_not_reused(correlation):
    correlator, store, events = correlation
    correlator.correlate([det("dpi.x", 0.7, 0), det("dpi.y", 0.7, 1)])
    (alert,) = store.query()
    correlator.correlate([det("dpi.z", 0.4, 100)])
    (updated,) = store.query()
    assert updated.id == alert.id and updated.detection_count == 3 and [e for e, _ in events] == ["opened", "updated"]
    store.set_status(alert.id, "Resolved")
    correlator.correlate([det("dpi.x", 0.7, 200), det("dpi.y", 0.7, 201)])
    assert len(store.query()) == 2 and store.active == 1


def test_protocol_category_wins_over_behaviour_in_one_group(correlation):
    correlator, store, _ = correlation
    correlator.correlate([det("behaviour.beaconing", 0.8, 0, category=Category.BEACONING),
                          det("behaviour.beaconing", 0.8, 60, category=Category.BEACONING),
                          det("dpi.http.encoded_data", 0.5, 61, category=Category.HTTP_COVERT_CHANNEL)])
    (alert,) = store.query()
    assert alert.category == "HttpCovertChannel"


def test_dga_names_score_high_and_benign_names_low():
    scorer = NameScorer.load()
    domains = RegisteredDomains()
    day = dt.date(2024, 5, 1)
    for family in (dga_families.cryptolocker(day, 50), dga_families.locky(day, 50), dga_families.ramnit(0x1234, 50)):
        scores = [scorer.score(domains.split(d)[1]) for d in family]
        assert sum(s >= 0.5 for s in scores) / len(scores) >= 0.4
    benign = [scorer.score(s) for s in BENIGN_SITES]
    assert sum(s >= 0.5 for s in benign) / len(benign) < 0.03


def test_registered_domain_follows_the_public_suffix_list():
    domains = RegisteredDomains()
    assert domains.registered("a.b.example.co.uk") == "example.co.uk"
    assert domains.split("x.y.tunnel.com") == ("tunnel.com", "tunnel")
    assert domains.registered("foo.blogspot.com") == "foo.blogspot.com"


@pytest.mark.parametrize("jitter", [0.0, 0.1, 0.2])
def test_beaconing_survives_jitter_and_a_missed_beat(jitter):
    rng = random.Random(7)
    t, starts = 0.0, []
    for beat in range(20):
        if beat != 9:
            starts.append(int(t * NS))
        t += 60 * rng.uniform(1 - jitter, 1 + jitter)
    scores = beacon_scores(starts, [900] * len(starts), 5.0)
    assert scores is not None and scores["interval_cv"] < 0.15 and scores["missed_beats"] >= 1


def test_irregular_browsing_is_not_a_beacon():
    rng = random.Random(3)
    t, starts = 0.0, []
    for _ in range(30):
        starts.append(int(t * NS))
        t += rng.expovariate(1 / 60)
    scores = beacon_scores(starts, [rng.randint(500, 50_000) for _ in starts], 5.0)
    assert scores is not None and scores["interval_cv"] > 0.15


def test_ping_patterns():
    stamp = bytes(16)
    assert is_ping_pattern(stamp + bytes(range(0x10, 0x10 + 40)))  # Linux ping -s 56
    assert is_ping_pattern(stamp + bytes((0x10 + i) & 0xFF for i in range(1384)))  # ping -s 1400
    assert is_ping_pattern(b"abcdefghijklmnopqrstuvwabcdefghi")  # Windows
    assert is_ping_pattern(stamp + b"\xff" * 40)  # ping -p ff
    rng = random.Random(1)
    assert not is_ping_pattern(bytes(rng.getrandbits(8) for _ in range(64)))
    assert not is_ping_pattern(b"whoami /all & net user & ipconfig /all")


def test_ping_patterns_are_what_the_byte_at_a_time_reference_says():
    from tests.appliance.detection.icmp_reference import is_ping_pattern_reference

    rng = random.Random(7)
    windows = b"abcdefghijklmnopqrstuvw"
    cases = [b"", b"x" * 16, windows[:17], windows * 3, windows * 3 + b"a", windows * 3 + b"x", (windows * 3)[:-1] + b"x"]
    for _ in range(3000):
        n = rng.choice([8, 17, 23, 24, 40, 56, 255, 256, 257, 600, 1400])
        start = rng.randrange(256)
        ramp = bytes((start + i) & 0xFF for i in range(n))
        data = bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 8, 16]))) + ramp  # a timestamp, then the ramp
        if rng.random() < 0.5:  # one byte off, anywhere (the last, across a wrap, in the stamp)
            i = rng.randrange(len(data))
            data = data[:i] + bytes([(data[i] + rng.choice([1, 255, 128])) & 0xFF]) + data[i + 1 :]
        cases.append(data)
        periodic = (bytes(rng.getrandbits(8) for _ in range(rng.choice([1, 2, 4, 8, 16, 3]))) * 90)[:n]
        if rng.random() < 0.5:
            i = rng.randrange(len(periodic))
            periodic = periodic[:i] + bytes([periodic[i] ^ 1]) + periodic[i + 1 :]
        cases.append(bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 8, 16]))) + periodic)
    for data in cases:
        assert is_ping_pattern(data) == is_ping_pattern_reference(data), data
    assert {is_ping_pattern(d) for d in cases} == {True, False}


def test_an_update_does_not_undo_a_triage_change_made_meanwhile(correlation):
    correlator, store, _ = correlation
    correlator.correlate([det("dpi.x", 0.7, 0), det("dpi.y", 0.7, 1)])
    (alert,) = store.query()
    stale = store.get(alert.id)
    store.set_status(alert.id, "Investigating")  # the analyst acts between the correlator's read and write
    assert stale is not None
    stale.detection_count += 1
    store.save("updated", stale)
    assert store.get(alert.id).status == "Investigating"  # type: ignore[union-attr]


def test_hostile_payloads_never_raise_in_any_layer():
    from appliance.detection.behaviour import BehaviourLayer
    from appliance.detection.dpi.layer import DpiLayer
    from appliance.detection.facts import FlowFacts
    from appliance.detection.resolutions import ResolverCache
    from appliance.detection.signatures.engine import SignatureEngine
    from appliance.model import DnsAnswer, DnsMessage, FlowRecord, IcmpInfo, Packet, Transport
    from tests.appliance.detection.conftest import RULES

    holder = AnalysisConfigHolder(AnalysisConfig())
    facts, domains = FlowFacts(), RegisteredDomains()
    signatures = SignatureEngine(RULES, holder, facts, domains)
    assert signatures.reload() == []
    scorer = NameScorer.load()
    layers = [DpiLayer(holder, facts, ResolverCache(), domains, scorer, WordModel.load(scorer)), signatures, BehaviourLayer(holder)]
    rng = random.Random(5)
    prefixes = [b"\x16\x03\x01", b"\x16\x03\x01\x00\x05\x01\x00\x00\xff\x03\x03", b"GET / HTTP/1.1\r\n", b"POST ",
                b"HTTP/1.1 200", b"", b"\xd5\x20\x08\x80"]
    for i in range(3000):
        transport = rng.choice([Transport.TCP, Transport.UDP, Transport.ICMP])
        proto = {Transport.TCP: 6, Transport.UDP: 17, Transport.ICMP: 1}[transport]
        ts = i * 10**9
        samples = []
        for _ in range(rng.randint(0, 4)):
            payload = rng.choice(prefixes) + bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 300)))
            icmp = IcmpInfo(rng.choice([0, 8, 3]), 0, payload) if transport is Transport.ICMP else None
            samples.append(Packet(ts, rng.choice([1, 2]), proto, transport, 1, 2, 1000, 443, len(payload) + 40,
                                  payload, 0, 0, "", None, icmp))
        name = "".join(rng.choice("ab.-_=\\x\u00e9") for _ in range(rng.randint(0, 80))).strip(".")
        dns = [DnsMessage(rng.getrandbits(16), rng.random() < 0.5, rng.randint(0, 15), name, rng.randint(0, 300), 1,
                          [DnsAnswer(name, 1, 60, "1.2.3.4"), DnsAnswer(name, 5, 60, "")], rng.random() < 0.3, ts)
               ] if transport is not Transport.ICMP and rng.random() < 0.5 else []
        flow = FlowRecord(f"f{i}", f"agent{i % 3}", proto, transport, 167772161, rng.choice([53, 40000]),
                          rng.getrandbits(32) or 1, rng.choice([53, 80, 443, 0, 9999]), ts, ts + rng.randint(0, 10**10),
                          rng.randint(0, 9), rng.randint(0, 9), rng.randint(0, 10**9), rng.randint(0, 10**7),
                          0, 0, 0, 0, "", "idle", dns, samples)
        for layer in layers:
            for detection in layer.analyze(flow):
                assert 0.0 <= detection.confidence <= 1.0 and detection.indicator is not None


def test_beacon_spread_in_floats_agrees_with_statistics_pstdev():
    """beacon_scores computes standard deviations in floats (fast): they agree with the exact ones."""
    import statistics

    from appliance.detection.behaviour import _pstdev

    rng = random.Random(5)
    for _ in range(500):
        n = rng.randrange(2, 400)
        values = [rng.randrange(0, 10**7) for _ in range(n)] if rng.random() < 0.5 else [rng.uniform(0, 3600) for _ in range(n)]
        assert _pstdev(values, statistics.fmean(values)) == pytest.approx(statistics.pstdev(values), rel=1e-12, abs=1e-12)
    sizes = [1200] * 50  # constant sizes: exactly no spread
    assert _pstdev(sizes, 1200.0) == 0.0
    scores = beacon_scores([i * 60 * 10**9 for i in range(20)], [500 + (i % 2) for i in range(20)], 1.0)
    assert scores is not None and scores["interval_cv"] == 0.0 and scores["size_cv"] == 0.001
