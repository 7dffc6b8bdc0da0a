"""native dpi.correlation_sums: Correlator._judge's loop over a group in C, held equal to its Python twin
(correlation.group_sums) on random groups and at the edges, and declining (TypeError) what it cannot hold exactly."""

from __future__ import annotations

import math
import random
from collections import deque

import pytest

from appliance.detection.correlation import group_sums
from appliance.model import Category, Detection, Severity
from appliance.native.dpi import correlation_sums

NS = 1_000_000_000
_DETECTORS = ["dpi.dns.dga", "behaviour.beaconing", "signature:SIG-1", "dpi.http.encoded_data"]


def _detection(rng: random.Random, now: int) -> Detection:
    return Detection(rng.choice(_DETECTORS), rng.choice(list(Category)),
                     rng.choice([0.0, -0.0, 0.2, 0.5, 0.5, 0.95, 1.0, 1.3, -0.4, 1e-300]),
                     rng.choice(list(Severity)), "a1", "x.example", {}, [], now - rng.randrange(3600) * NS,
                     now - rng.choice([0, 0, 1, NS, 300 * NS, 7200 * NS, -5 * NS]))


def _same(got: tuple, want: tuple) -> None:
    """Equal as the judgement reads them: the floats bit for bit (NaN as NaN), the dicts in the same order, each
    lead the same detection object."""
    (r1, det1, w1, l1, s1), (r2, det2, w2, l2, s2) = got, want
    assert (math.isnan(r1) and math.isnan(r2)) or r1 == r2 and math.copysign(1, r1) == math.copysign(1, r2)
    assert det1 == det2 and s1 is s2
    assert list(w1) == list(w2) and all(w1[k] == w2[k] or math.isnan(w1[k]) and math.isnan(w2[k]) for k in w1)
    assert list(l1) == list(l2) and all(l1[k][0] is l2[k][0] and (l1[k][1] == l2[k][1] or math.isnan(l1[k][1])
                                                                   and math.isnan(l2[k][1])) for k in l1)


@pytest.mark.parametrize("seed", range(6))
def test_the_sums_are_the_python_loops(seed: int) -> None:
    rng = random.Random(seed)
    now = 1_700_000_000 * NS
    for _ in range(300):
        group = deque(_detection(rng, now) for _ in range(rng.choice([1, 2, 5, 17, 60])))
        half_life = rng.choice([600.0 * NS, 30.0 * NS, 1.0, 900 * NS])  # a float, and an int of nanoseconds
        _same(correlation_sums(group, now, half_life), group_sums(group, now, half_life))


def test_ties_keep_the_first_strongest_and_the_first_highest_severity() -> None:
    now = 10 * NS
    first = Detection("d1", Category.BEACONING, 0.5, Severity.HIGH, "a", "i", last_ns=now)
    second = Detection("d2", Category.BEACONING, 0.5, Severity.HIGH, "a", "i", last_ns=now)
    remaining, detectors, weights, leads, severity = correlation_sums([first, second], now, 600.0 * NS)
    assert leads[Category.BEACONING][0] is first and severity is first.severity
    assert remaining == 0.25 and detectors == {"d1", "d2"} and weights == {Category.BEACONING: 1.0}


def test_odd_confidences_give_what_python_gives() -> None:
    now = 10 * NS
    for value in (math.nan, math.inf, -math.inf, 5e-324, 1.0000000000000002):
        group = [Detection("d", Category.DGA, value, Severity.LOW, "a", "i", last_ns=now - NS)]
        _same(correlation_sums(group, now, 600.0 * NS), group_sums(group, now, 600.0 * NS))


@pytest.mark.parametrize("group, now, half_life", [
    ([Detection("d", Category.DGA, 1, Severity.LOW, "a", "i", last_ns=5)], 10, 600.0 * NS),  # an int confidence
    ([Detection("d", Category.DGA, 0.5, Severity.LOW, "a", "i", last_ns=2**70)], 10, 600.0 * NS),  # past 64 bits
    ([Detection("d", Category.DGA, 0.5, Severity.LOW, "a", "i", last_ns=-(2**54))], 2**54, 600.0 * NS),  # an age past 2**53
    ([Detection("d", Category.DGA, 0.5, Severity.LOW, "a", "i", last_ns=5)], 2**80, 600.0 * NS),
    ([Detection("d", Category.DGA, 0.5, Severity.LOW, "a", "i", last_ns=5)], 10, 2**60),  # an int half-life past 2**53
    ([Detection("d", Category.DGA, 0.5, Severity.LOW, "a", "i", last_ns=5)], 10, "600"),
    ([Detection("d", Category.DGA, 0.5, Severity.LOW, "a", "i", last_ns=5)], -1, 600.0 * NS),  # before the epoch
    ([Detection("d", Category.DGA, 0.5, Severity.LOW, "a", "i", last_ns=5)], 10, 0.0),  # Python divides by zero
    ([Detection("d", Category.DGA, 0.5, Severity.LOW, "a", "i", last_ns=5)], 10, float("nan")),
])
def test_what_c_cannot_hold_exactly_is_declined_for_the_python_loop(group: list, now: object, half_life: object) -> None:
    with pytest.raises((TypeError, ValueError)):  # ValueError: a timestamp outside [0, 2**62), as dnsw_timestamp says
        correlation_sums(group, now, half_life)


def group_sums_probability(group: list[Detection]) -> float:
    """The judgement's probability of `group` by the Python loop (the default config, judged at its newest)."""
    from appliance.detection.analysis_config import AnalysisConfig
    from appliance.detection.correlation import _combined

    config = AnalysisConfig().correlation
    now = max(d.last_ns for d in group)
    remaining, detectors, *_ = group_sums(group, now, config.half_life_s * NS)
    return _combined(remaining, len(detectors), config)


def test_the_correlator_takes_the_python_loop_for_a_group_c_declines(tmp_path) -> None:
    """An int confidence (a detector that wrote 1, not 1.0), a timestamp before the epoch: the alert is the one the
    Python loop gives."""
    from appliance.detection.alert_channel import AlertChannel
    from appliance.detection.alert_store import AlertStore
    from appliance.detection.analysis_config import AnalysisConfig
    from appliance.detection.analysis_config_holder import AnalysisConfigHolder
    from appliance.detection.correlation import Correlator
    from appliance.detection.database import DetectionDatabase

    db = DetectionDatabase(tmp_path / "detection.db")
    store, channel = AlertStore(db), AlertChannel()
    published = []
    channel.subscribe(store.save)
    channel.subscribe(lambda event, alert: published.append((event, alert.confidence, alert.detection_count)))
    correlator = Correlator(AnalysisConfigHolder(AnalysisConfig()), store, channel)
    now = 1_700_000_000 * NS
    pair = [Detection(detector, Category.RAW_IP_TLS, 1, Severity.HIGH, "a", "i", first_ns=now, last_ns=now)
            for detector in ("dpi.tls.raw_ip", "signature:SIG-1")]
    assert correlator.correlate(pair) == 1
    assert published == [("opened", 0.99, 2)]
    before_epoch = [Detection(detector, Category.DGA, 0.6, Severity.LOW, "b", "j", first_ns=-2 * NS, last_ns=-NS)
                    for detector in ("dpi.dns.dga", "signature:SIG-2")]
    assert correlator.correlate(before_epoch) == 1
    assert published[-1] == ("opened", round(group_sums_probability(before_epoch), 3), 2)
    db.close()
