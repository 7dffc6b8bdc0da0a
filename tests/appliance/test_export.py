"""The JSON-lines export (export.*): a real appliance fed over gRPC writes flows and alerts that validate
against the documented schema; files rotate by size; a full queue drops and counts, never blocks."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from appliance.export import SCHEMA_FILE, JsonLinesExporter
from appliance.model import FlowRecord, Transport
from tests.appliance.detection import scenarios as sc
from tests.appliance.detection.conftest import alerts_of, start_detecting

VALIDATOR = jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text()),
                                            format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_schema_is_a_valid_json_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(json.loads(SCHEMA_FILE.read_text()))


def test_a_tunnel_over_grpc_is_exported_as_flows_and_alerts_that_validate(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("SENSOR_ADMIN_TOKEN", raising=False)
    path = tmp_path / "export" / "eve.json"
    running = start_detecting(tmp_path, export={"enabled": True, "path": str(path)})
    try:
        sent = sc.stream(running.stub(), sc.iodine_tunnel())
        assert sent > 0
        alerts = alerts_of(running)
        assert alerts
        assert set(running.rest.get("/api/v1/metrics")[1]["export"]) == {"written", "dropped", "rotations", "write_errors", "queued"}
    finally:
        running.app.stop()  # drains analysis, then writes what is queued
    events = lines(path)
    for event in events:
        VALIDATOR.validate(event)
    flows = [e for e in events if e["event_type"] == "flow"]
    exported_alerts = [e for e in events if e["event_type"] == "alert"]
    assert len(flows) >= 1 and {e["agent_id"] for e in flows} == {alerts[0]["agent_id"]}
    assert {a["id"] for a in alerts} <= {e["alert"]["id"] for e in exported_alerts}
    opened = [e for e in exported_alerts if e["alert"]["event"] == "opened"]
    assert len(opened) == len(alerts)
    # The alert's flows are in the export too, under the same ids (pivot from the alert to its flows).
    cited = {f for e in exported_alerts for d in e["alert"]["detections"] for f in d["flow_ids"]}
    assert cited and cited <= {e["flow_id"] for e in flows}
    stats = running.app.analysis.export_stats()
    assert stats["written"] == len(events)
    assert stats["dropped"] == 0


def test_export_is_off_by_default(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("SENSOR_ADMIN_TOKEN", raising=False)
    running = start_detecting(tmp_path)
    try:
        sc.stream(running.stub(), sc.iodine_tunnel())
        alerts_of(running)
        assert running.app.analysis.export_stats() == {} and running.rest.get("/api/v1/metrics")[1]["export"] == {}
    finally:
        running.app.stop()
    assert not list(tmp_path.rglob("eve.json*"))


def flow(i: int) -> FlowRecord:
    record = FlowRecord(f"{i:020x}", "agent-1", 6, Transport.TCP, 0x0A000005, 40000 + i % 1000, 0x5DB8D822, 443,
                        1_763_884_800_000_000_000 + i, 1_763_884_801_000_000_000 + i)
    record.end_reason = "idle"
    return record


def test_files_rotate_by_size_and_keep_the_newest(tmp_path: Path) -> None:
    path = tmp_path / "eve.json"
    exporter = JsonLinesExporter(path, flows=True, alerts=True, queue_size=100_000, max_bytes=1 << 16, keep=3)
    exporter.start()
    for start in range(0, 3000, 100):
        exporter.flows(flow(i) for i in range(start, start + 100))
    exporter.stop()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["eve.json", "eve.json.1", "eve.json.2", "eve.json.3"]
    assert exporter.rotations > 3  # older files than .3 were dropped, as configured
    for name in files[1:]:
        assert (tmp_path / name).stat().st_size >= 1 << 16
    ids = [e["flow_id"] for name in reversed(files) for e in lines(tmp_path / name)]
    assert ids == sorted(ids) and ids[-1] == f"{2999:020x}"  # newest last, in order, nothing torn
    for event in lines(path):
        VALIDATOR.validate(event)


def test_a_full_queue_drops_and_counts_instead_of_blocking(tmp_path: Path) -> None:
    exporter = JsonLinesExporter(tmp_path / "eve.json", flows=True, alerts=True, queue_size=100, max_bytes=1 << 20, keep=2)
    exporter.flows(flow(i) for i in range(250))  # not started: nothing drains
    assert exporter.stats()["queued"] == 100 and exporter.dropped == 150
    exporter.start()
    exporter.stop()
    assert len(lines(tmp_path / "eve.json")) == 100 == exporter.written


@pytest.mark.parametrize("broken", [{"max_bytes": 10}, {"keep": 0}, {"queue": 5}, {"path": ""}])
def test_bad_export_settings_are_refused(tmp_path: Path, broken: dict) -> None:
    from appliance.config import parse_settings
    from appliance.errors import ConfigError

    with pytest.raises(ConfigError):
        parse_settings({"export": {"enabled": True, **broken}})


def test_the_documented_example_validates() -> None:
    docs = Path(__file__).resolve().parents[2] / "docs" / "export.md"
    examples = [json.loads(line) for line in docs.read_text().splitlines() if line.startswith('{"timestamp"')]
    assert examples
    for example in examples:
        VALIDATOR.validate(example)
