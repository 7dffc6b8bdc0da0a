"""The three DGA kinds the trigram score alone missed (dictionary, pronounceable, short bursts),
each found through the real gRPC path by two independent signals; hostile name floods stay bounded."""

from __future__ import annotations

import random

import pytest

from appliance.detection.dpi.dga import NameScorer
from appliance.detection.dpi.dga_words import WordModel
from tests.appliance.detection import dga_corpus as dc
from tests.appliance.detection import scenarios as sc
from tests.appliance.detection.conftest import alerts_of

FAMILIES = {f.name: f for f in dc.FAMILIES}


@pytest.fixture(scope="module")
def words() -> WordModel:
    return WordModel.load(NameScorer.load())


@pytest.mark.parametrize(("family", "kind"), [("suppobox", "dictionary"), ("matsnu", "dictionary"),
                                              ("simda", "pronounceable"), ("symmi", "pronounceable"),
                                              ("tinba", "random"), ("locky", "random")])
def test_each_kind_raises_one_dga_alert_from_two_independent_signals_over_grpc(detecting, family, kind):
    stream = dc.infected_host(FAMILIES[family], 0, background=10)
    assert sc.stream(detecting.stub(), stream) == len(stream.packets)
    alerts = alerts_of(detecting)
    assert [a["category"] for a in alerts] == ["DomainGeneration"], [a["summary"] for a in alerts]
    (alert,) = alerts
    assert alert["indicator"] == sc.RESOLVER
    by_detector = {d["detector"]: d["evidence"] for d in alert["detections"]}
    assert {"dpi.dns.nx_burst", "dpi.dns.dga_lexical"} <= set(by_detector), sorted(by_detector)
    burst = by_detector["dpi.dns.nx_burst"]
    assert burst["unresolved_unknown_domains"] >= 6 and burst["baseline_windows"] >= 0
    lexical = by_detector["dpi.dns.dga_lexical"]
    assert max(lexical["kinds"], key=lexical["kinds"].get) == kind, lexical["kinds"]
    sample = lexical["samples"][-1]
    assert {"label", "kind", "words", "word_lengths", "coverage", "unusual_pairs", "alternation"} <= set(sample)


def test_a_short_burst_of_eight_names_is_enough(detecting):
    family = FAMILIES["ranbyus"]
    s = sc.Stream("burst-eight", sc.agent_ip(150))
    names = family.generate(random.Random(5), 8)
    for i, name in enumerate(names):
        s.dns(sc.T0_MS + i * 1500, name, rcode=0 if i == 7 else 3)
    sc.stream(detecting.stub(), s)
    (alert,) = alerts_of(detecting)
    assert alert["category"] == "DomainGeneration"
    assert {"dpi.dns.nx_burst", "dpi.dns.dga_lexical"} <= {d["detector"] for d in alert["detections"]}


def test_office_failures_raise_nothing_typos_expired_names_and_search_suffixes(detecting):
    picker = dc.BenignPicker(dc.preload_domains())
    streams = [dc.benign_host(n, picker, 80, 20, seed=3)[0] for n in range(12)]
    heavy = sc.Stream("suffix-misconfigured", sc.agent_ip(160))  # every name also tried under the search suffix
    rng = random.Random(9)
    for i in range(40):
        site = picker.pick(rng)
        heavy.dns(sc.T0_MS + i * 2000, f"www.{site}.corp.example.com", rcode=3)
        heavy.dns(sc.T0_MS + i * 2000 + 30, f"www.{site}")
    sc.stream_together(detecting, streams + [heavy])
    assert alerts_of(detecting) == []


def test_a_dead_name_that_many_agents_ask_for_is_not_unknown(detecting):
    """Ten agents each failing on the same eight retired names (a stale config pushed to all) raise nothing."""
    retired = [f"{w}.example-retired.com" for w in ("alpha", "beta")] + \
        [f"{w}-legacy-portal.com" for w in ("north", "south", "east", "west", "central", "branch")]
    streams = []
    for n in range(10):
        s = sc.Stream(f"stale-{n}", sc.agent_ip(170 + n))
        for i, name in enumerate(retired):
            s.dns(sc.T0_MS + n * 100 + i * 1000, name, rcode=3)
        streams.append(s)
    sc.stream_together(detecting, streams)
    # The first agents to ask see unknown names; once three agents asked, none of them is unknown.
    alerted = {a["agent_id"] for a in alerts_of(detecting)}
    assert len(alerted) <= 2, alerted


def test_a_flood_of_hostile_failed_names_stays_bounded_and_the_server_keeps_serving(detecting):
    s = sc.Stream("hostile-names", sc.agent_ip(190))
    rng = random.Random(1)
    for i in range(3000):
        label = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789-") for _ in range(63)).strip("-") or "x"
        s.dns(sc.T0_MS + i * 20, f"{label}.{rng.choice(['com', 'net', 'xn--p1ai'])}", rcode=3, sport=50000 + i % 8)
    assert sc.stream(detecting.stub(), s) == len(s.packets)
    alerts = alerts_of(detecting)
    assert [a["category"] for a in alerts] == ["DomainGeneration"]
    state = detecting.app.detection.dpi.dga._agents[alerts[0]["agent_id"]]
    assert len(state.failed) <= 256
    status, metrics = detecting.rest.get("/api/v1/metrics")
    assert status == 200 and metrics["analysis_errors"] == 0


def test_label_shapes(words):
    assert words.shape("heavenfurther").kind == "dictionary"
    assert words.shape("heavenfurther").words == ("heaven", "further")
    assert words.shape("lyvyxor").kind == "pronounceable"
    assert words.shape("xkqwpzhtrv").kind == "random"
    # Compound brands (github, facebook) do look dictionary-shaped: the shape counts only for names that
    # failed to resolve and that no other agent asks for (dga_signals.py).
    for benign in ("wikipedia", "amazon", "bestbuy", "google", "weather"):
        assert words.shape(benign).kind == "", words.shape(benign)
    long = words.shape("a" * 300)  # longer than a DNS label can be: cut, not slow
    assert len(long.label) == 63


def test_burst_keys_are_validated_and_take_effect_over_rest(detecting):
    rest = detecting.rest
    status, config = rest.get("/api/v1/config")
    assert status == 200 and config["dga"]["burst_min_domains"] == 6 and config["dga"]["lexical_min_share"] == 0.6
    for key, bad in (("burst_min_domains", 0), ("lexical_min_share", 1.5), ("burst_window_s", -1),
                     ("common_domain_agents", 1), ("burst_baseline_factor", "many")):
        status, body = rest.post("/api/v1/config", {**config, "dga": {**config["dga"], key: bad}})
        assert status == 422 and body["field"] == f"dga.{key}", body
    strict = {**config, "dga": {**config["dga"], "burst_min_domains": 50, "lexical_min_domains": 50}}
    assert rest.post("/api/v1/config", strict)[0] == 200
    sc.stream(detecting.stub(), dc.infected_host(FAMILIES["tinba"], 0))
    assert alerts_of(detecting) == []  # 8-12 names: out of reach of the raised bars and of the older detectors


def test_a_resolver_outage_is_not_a_dga(detecting):
    """SERVFAIL for every name during an outage: many distinct unknown names fail, none NXDOMAIN."""
    picker = dc.BenignPicker(dc.preload_domains())
    rng = random.Random(21)
    s = sc.Stream("outage", sc.agent_ip(195))
    for i in range(60):
        s.dns(sc.T0_MS + i * 1000, "www." + rng.choice(picker.domains), rcode=2)
    sc.stream(detecting.stub(), s)
    assert alerts_of(detecting) == []
