"""CUSUM on per-agent outbound volume, over gRPC: a slow, steady exfiltration over hours of event time
is caught by the cumulative sum while the per-window Z-score never fires; the keys are validated."""

from __future__ import annotations

import random

from tests.appliance.detection import scenarios as sc
from tests.appliance.detection.conftest import alerts_of, recorded_detections

EXFIL = "198.51.100.77"  # the collector; resolved from a registered domain, reached over TLS
SAAS = ["52.96.10.1", "142.250.1.10", "34.120.5.5", "13.107.42.14", "162.125.6.1", "104.18.2.2"]
MINUTE = 60_000


def slow_exfiltration(hours: float = 5.0, exfil_from_min: int = 60, exfil_bytes: int = 1_000_000,
                      seed: int = 20) -> sc.Stream:
    """An office uploader (1-5 MB a minute spread over six SaaS services) that, from `exfil_from_min`
    on, also sends `exfil_bytes` a minute to one server: under one standard deviation per window."""
    rng = random.Random(seed)
    s = sc.Stream("victim-slow", sc.agent_ip(120))
    for minute in range(int(hours * 60)):
        t = sc.T0_MS + minute * MINUTE
        n = rng.randrange(len(SAAS))
        at = t + rng.randint(10_000, 20_000)  # one upload per one-minute window
        s.dns(at, f"sync{n}.example-saas.com", answers=[SAAS[n]])
        s.tls(at + 30, SAAS[n], f"sync{n}.example-saas.com", rng.randint(1_000_000, 5_000_000), 20_000)
        if minute >= exfil_from_min:
            if minute == exfil_from_min:
                s.dns(t + 29_000, "cdn-sync-updates.net", answers=[EXFIL])
            # Jittered in time and size, as a careful tool does (a fixed period would be a beacon).
            s.tls(t + 29_500 + rng.randint(0, 30_000), EXFIL, "cdn-sync-updates.net",
                  rng.randint(exfil_bytes * 7 // 10, exfil_bytes * 13 // 10), 4_000)
    return s


def test_slow_exfiltration_over_hours_is_caught_by_cusum_and_not_by_the_z_score(detecting):
    rest = detecting.rest
    status, config = rest.get("/api/v1/config")
    assert status == 200 and config["volume"]["cusum"] and config["volume"]["cusum_k"] == 0.5
    # The Z-score judged on its own terms: no byte floor, so it is its 3 sigma that keeps it quiet.
    assert rest.post("/api/v1/config", {**config, "volume": {**config["volume"], "min_bytes": 1}})[0] == 200
    seen = recorded_detections(detecting)
    stream = slow_exfiltration()
    assert sc.stream(detecting.stub(), stream) == len(stream.packets)
    assert detecting.app.pipeline.drain()
    assert [d for d in seen if d.detector == "behaviour.volume"] == []
    cusum = [d for d in seen if d.detector == "behaviour.cusum"]
    assert len(cusum) >= 2  # the sum starts over after each alarm and the upload goes on
    first = cusum[0]
    assert first.indicator == EXFIL and first.evidence["baseline_std"] > 0 and "max_window_z" in first.evidence
    assert first.evidence["cumulative_excess_bytes"] >= 50_000_000 and first.evidence["windows"] >= 20
    started_ns = (sc.T0_MS + 60 * MINUTE) * 1_000_000
    assert first.first_ns >= started_ns - 15 * MINUTE * 1_000_000  # the run begins about when the exfiltration does
    assert "accumulated over" in first.evidence["reason"]
    assert alerts_of(detecting) == []  # alarms an hour apart do not correlate: an alert needs a second signal


def test_the_same_uploader_without_exfiltration_raises_nothing(detecting):
    seen = recorded_detections(detecting)
    sc.stream(detecting.stub(), slow_exfiltration(hours=3.0, exfil_from_min=10_000))
    assert detecting.app.pipeline.drain()
    assert [d.detector for d in seen if d.detector.startswith("behaviour.")] == []
    assert alerts_of(detecting) == []


def test_cusum_keys_are_validated_over_rest(detecting):
    rest = detecting.rest
    _, config = rest.get("/api/v1/config")
    for key, bad in (("cusum_k", -1), ("cusum_h", 0), ("cusum_min_bytes", 0), ("cusum", "sometimes")):
        status, body = rest.post("/api/v1/config", {**config, "volume": {**config["volume"], key: bad}})
        assert status == 422 and body["field"] == f"volume.{key}", body
