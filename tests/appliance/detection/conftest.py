"""Fixtures for detection tests: an appliance with the shipped rules loaded."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import RunningAppliance, start_appliance

RULES = Path(__file__).resolve().parents[3] / "rules"
SHIPPED_RULES = len(list(RULES.glob("*.yaml")))  # counted, so a branch adding a rule changes no test


def start_detecting(tmp: Path, **overrides: Any) -> RunningAppliance:
    signatures = tmp / "signatures"
    signatures.mkdir(parents=True, exist_ok=True)
    for rule in RULES.glob("*.yaml"):
        shutil.copy(rule, signatures / rule.name)
    return start_appliance(tmp, **overrides)


@pytest.fixture
def detecting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RunningAppliance]:
    """A started appliance (mTLS gRPC, HTTPS REST) with the shipped rules in its signatures directory."""
    monkeypatch.delenv("SENSOR_ADMIN_TOKEN", raising=False)
    running = start_detecting(tmp_path)
    try:
        yield running
    finally:
        running.app.stop()


def alerts_of(running: RunningAppliance, **filters: str) -> list[dict[str, Any]]:
    assert running.app.analysis.drain(), "analysis did not finish the flows handed to it"
    query = "&".join(f"{k}={v}" for k, v in filters.items())
    status, body = running.rest.get("/api/v1/alerts?limit=1000" + (f"&{query}" if query else ""))
    assert status == 200, body
    return body["alerts"]


def recorded_detections(running: RunningAppliance) -> list[Any]:
    """Every detection the pipeline hands to correlation from now on, as it goes (the correlator still runs):
    for signals that alone open no alert."""
    seen: list[Any] = []
    correlator = running.app.pipeline.correlator
    forward = correlator.correlate
    correlator.correlate = lambda found: (seen.extend(found), forward(found))[1]  # type: ignore[method-assign]
    return seen
