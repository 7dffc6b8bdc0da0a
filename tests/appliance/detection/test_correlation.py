"""Correlator._judge (one pass over a group) against the passes it replaced (correlation_reference.py): the
same alerts opened and updated, with the same content, for random streams of detections and triage."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from appliance.detection.alert import Alert
from appliance.detection.alert_channel import AlertChannel
from appliance.detection.alert_store import AlertStore
from appliance.detection.analysis_config import AnalysisConfig, CorrelationConfig
from appliance.detection.analysis_config_holder import AnalysisConfigHolder
from appliance.detection.correlation import Correlator
from appliance.detection.database import DetectionDatabase
from appliance.model import Category, Detection, Severity
from tests.appliance.detection.correlation_reference import CorrelatorReference

NS = 1_000_000_000
_DETECTORS = ["dpi.dns.dga", "dpi.dns.nxdomain", "behaviour.beaconing", "behaviour.volume", "signature:SIG-1",
              "dpi.tls.raw_ip"]


def _stream(seed: int) -> list[list[Detection]]:
    rng = random.Random(seed)
    batches = []
    t = 1_700_000_000 * NS
    for _ in range(300):
        batch = []
        for _ in range(rng.choice([1, 1, 1, 2, 3, 6])):
            t += rng.choice([0, 1, 5 * NS, 40 * NS, 200 * NS, -30 * NS])  # out of order now and then
            last = t + rng.choice([0, NS, 90 * NS])
            evidence: dict[str, Any] = {"reason": f"reason {rng.randrange(5)}"} if rng.random() < 0.8 else {}
            batch.append(Detection(rng.choice(_DETECTORS), rng.choice(list(Category)), rng.choice([0.0, 0.2, 0.5, 0.5, 0.7, 0.95, 1.0, 1.3]),
                                   rng.choice(list(Severity)), rng.choice(["a1", "a2"]), rng.choice(["x.example", "192.0.2.1", "y.test"]),
                                   evidence, [f"f{rng.randrange(99)}"], t, last))
        batches.append(batch)
    return batches


def _published(cls: type[Correlator], batches: list[list[Detection]], config: AnalysisConfig, tmp: Path,
               batched: bool, seed: int) -> tuple[list[tuple[Any, ...]], list[int]]:
    db = DetectionDatabase(tmp / f"{cls.__name__}.db")
    store = AlertStore(db, batched=batched)
    channel = AlertChannel()
    seen: list[tuple[Any, ...]] = []

    def snapshot(event: str, alert: Alert) -> None:
        seen.append((event, alert.agent_id, alert.indicator, alert.category, alert.severity, alert.confidence,
                     alert.summary, alert.first_ns, alert.last_ns, alert.status, [dict(d) for d in alert.detections],
                     alert.detection_count))

    channel.subscribe(store.save)
    channel.subscribe(snapshot)
    correlator = cls(AnalysisConfigHolder(config), store, channel)
    rng = random.Random(seed)
    opened = []
    for batch in batches:
        opened.append(correlator.correlate(batch))
        if rng.random() < 0.05:  # an analyst closes an open alert between rounds
            found = store.find_open(rng.choice(["a1", "a2"]), rng.choice(["x.example", "192.0.2.1", "y.test"]))
            if found is not None:
                store.set_status(found.id, "Resolved")
        store.commit()
    db.close()
    return seen, opened


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("batched", [False, True])
def test_the_correlator_publishes_what_the_reference_publishes(tmp_path: Path, seed: int, batched: bool) -> None:
    configs = [AnalysisConfig(), AnalysisConfig(correlation=CorrelationConfig(
        window_s=120.0, half_life_s=30.0, min_detections=1, min_confidence=0.3, diversity_bonus=0.25, diversity_cap=0.5,
        escalate_above=0.7))]
    for n, config in enumerate(configs):
        batches = _stream(seed * 10 + n)
        (tmp_path / str(n)).mkdir()
        got = _published(Correlator, batches, config, tmp_path / str(n), batched, seed)
        want = _published(CorrelatorReference, batches, config, tmp_path / str(n), batched, seed)
        assert got == want
        events = [e[0] for e in want[0]]
        assert events.count("opened") >= 3 and events.count("updated") >= 30  # the stream exercises both
        assert len({e[3] for e in want[0]}) >= 3 and len({e[4] for e in want[0]}) >= 2
