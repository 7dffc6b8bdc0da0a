"""The pipeline bench's second neighbour: analysis's own work, with no hand-off from a server.

`python -m bench.analysis_replay CPUS NICE FRAMES` pins itself to CPUS (comma-separated), lowers its priority by NICE,
reads FRAMES (what the server's outbox sends the analysis process, in order: DNS batches and flow record batches in
the contract's encoding, each behind its channel kind byte and a 4-byte big-endian length) and then, until it is
killed, handles them as the analysis process does (the DNS answers into the resolver cache, the flows decoded and
analysed: record_codec.decode, AnalysisPipeline.process_all; a commit per frame), through a new analysis (its own
state directory) each pass. It prints "ready" once the frames are read and the first analysis is built.

Beside ingestion alone this is what analysis's work costs ingestion on a host whose CPUs share a core, caches or
memory bandwidth, with no channel, drain or coupling: the ceiling of the ratio for analysis as heavy as it is now.
What it leaves out of the analysis process's work: reading the channel, drains and the counters' reports. Until
2026-11-30 it left out the DNS answers too: without them the resolver cache knew no name, and every TLS flow of the
office agents was judged a connection to a bare address, a detection each for correlation and the store: heavier
work than analysis does.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path


_HEAD = 5  # the kind byte and the payload's length


def read_frames(path: Path) -> list[tuple[bytes, bytes]]:
    data = path.read_bytes()
    frames, at = [], 0
    while at + _HEAD <= len(data):
        kind, size = data[at : at + 1], int.from_bytes(data[at + 1 : at + _HEAD], "big")
        frames.append((kind, data[at + _HEAD : at + _HEAD + size]))
        at += _HEAD + size
    if at != len(data) or not frames:
        raise ValueError(f"{path}: not a list of kind- and length-prefixed frames")
    return frames


def write_frames(path: Path, frames: list[tuple[bytes, bytes]]) -> None:
    path.write_bytes(b"".join(kind + len(payload).to_bytes(4, "big") + payload for kind, payload in frames))


def replay(frames: list[tuple[bytes, bytes]], state: Path, built: Callable[[], None] | None = None) -> list[tuple[str, str]]:
    """One pass: a new analysis with its state in `state` handles `frames` as the analysis process does (`built()`
    once it is built, before the first frame); the alerts it raised, (category, agent id) sorted."""
    from appliance.analysis.channel import FLOWS
    from appliance.app import build_analysis, open_stores
    from appliance.detection import SAMPLED_PROTOCOLS
    from appliance.flows import record_codec
    from bench.pipeline_bench import settings

    sampled = record_codec.sample_mask(SAMPLED_PROTOCOLS)
    config = settings(state)
    config.paths.state_dir.mkdir(parents=True, exist_ok=True)
    stores = open_stores(config, batched_alerts=True)
    try:
        parts, pipeline = build_analysis(config, stores, tls_views=False)
        if built is not None:
            built()
        for kind, payload in frames:
            if kind == FLOWS:
                pipeline.process_all(record_codec.decode(payload, sampled))
            else:
                pipeline.observe_dns_batch(payload, parts.resolver)
            stores.alerts.commit()
        return sorted((a.category, a.agent_id) for a in stores.alerts.query(limit=100_000))
    finally:
        stores.db.close()


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m bench.analysis_replay CPUS NICE FRAMES", file=sys.stderr)
        return 2
    os.sched_setaffinity(0, {int(c) for c in argv[0].split(",")})
    os.nice(int(argv[1]))
    logging.disable(logging.WARNING)
    from appliance.app import tune_analysis_garbage_collector

    frames = read_frames(Path(argv[2]))

    def ready() -> None:  # the analysis process's collector policy (automatic collection off), as it applies it
        tune_analysis_garbage_collector(threading.Event())
        print("ready", flush=True)

    first = True
    while True:
        with tempfile.TemporaryDirectory() as tmp:
            replay(frames, Path(tmp), ready if first else None)
            first = False


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
