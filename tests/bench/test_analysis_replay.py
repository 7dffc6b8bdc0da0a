"""The pipeline bench's second neighbour (bench/analysis_replay.py) replays analysis's own work: the frames
`handed_over` builds, handled as the analysis process handles them, raise what the appliance raises on the corpus.
Without the DNS batches the resolver cache knows no name and the office agents' TLS flows all look like
connections to bare addresses: three times the work (docs/figures.md, 2026-11-30)."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.analysis.channel import DNS, FLOWS
from bench.analysis_replay import read_frames, replay, write_frames
from bench.pipeline_bench import corpus, finished_flows, handed_over


def test_the_replayed_frames_raise_what_the_appliance_raises_on_the_corpus(tmp_path: Path) -> None:
    from appliance.app import build
    from bench.pipeline_bench import settings

    streams = corpus()
    write_frames(tmp_path / "frames", handed_over(streams))
    frames = read_frames(tmp_path / "frames")
    kinds = [kind for kind, _ in frames]
    assert set(kinds) == {DNS, FLOWS} and kinds.index(DNS) < kinds.index(FLOWS)  # answers ahead of the flows

    replayed = replay(frames, tmp_path / "replay")

    app = build(settings(tmp_path / "appliance"))  # analysis in process, its answers learnt first (pipeline_rounds)
    assert app.detection is not None and app.pipeline is not None
    flows = finished_flows(streams)
    for flow in flows:
        for message in flow.dns:
            if message.is_response:
                app.detection.resolver.observe(flow.agent_id, message)
    app.pipeline.process_all(flows)
    raised = sorted((a.category, a.agent_id) for a in app.detection.alerts.query(limit=100_000))
    app.detection.db.close()
    assert raised and replayed == raised
    assert replay([f for f in frames if f[0] == FLOWS], tmp_path / "flows-only") != raised  # the answers matter


def test_a_frames_file_that_is_cut_short_is_refused(tmp_path: Path) -> None:
    write_frames(tmp_path / "frames", [(FLOWS, b"\x08\x01"), (DNS, b"")])
    data = (tmp_path / "frames").read_bytes()
    assert read_frames(tmp_path / "frames") == [(FLOWS, b"\x08\x01"), (DNS, b"")]
    (tmp_path / "frames").write_bytes(data[:-1] + b"\x00\x00")  # a length that runs past the end
    with pytest.raises(ValueError):
        read_frames(tmp_path / "frames")
