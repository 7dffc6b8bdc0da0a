"""The pipeline bench's second neighbour: analysis's own work, with no hand-off from a server.

`python -m bench.analysis_replay CPUS NICE FRAMES` pins itself to CPUS (comma-separated), lowers its priority by NICE,
reads FRAMES (flow record batches in the contract's encoding, each behind a 4-byte big-endian length: what the
server's outbox sends the analysis process) and then, until it is killed, decodes and analyses them as the analysis
process does (record_codec.decode, AnalysisPipeline.process_all, a commit per batch), through a new analysis (its own
state directory) each pass. It prints "ready" once the frames are read and the first analysis is built.

Beside ingestion alone this is what analysis's work costs ingestion on a host whose CPUs share a core, caches or
memory bandwidth, with no channel, drain or coupling: the ceiling of the ratio for analysis as heavy as it is now.
What it leaves out of the analysis process's work: reading the channel and the DNS answers the server sends ahead
of the flows (a few percent of its CPU).
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from pathlib import Path


def read_frames(path: Path) -> list[bytes]:
    data = path.read_bytes()
    frames, at = [], 0
    while at < len(data):
        size = int.from_bytes(data[at : at + 4], "big")
        frames.append(data[at + 4 : at + 4 + size])
        at += 4 + size
    if at != len(data) or not frames:
        raise ValueError(f"{path}: not a list of length-prefixed frames")
    return frames


def write_frames(path: Path, frames: list[bytes]) -> None:
    path.write_bytes(b"".join(len(frame).to_bytes(4, "big") + frame for frame in frames))


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m bench.analysis_replay CPUS NICE FRAMES", file=sys.stderr)
        return 2
    os.sched_setaffinity(0, {int(c) for c in argv[0].split(",")})
    os.nice(int(argv[1]))
    logging.disable(logging.WARNING)
    from appliance.app import build_analysis, open_stores, tune_garbage_collector
    from appliance.detection import SAMPLED_PROTOCOLS
    from appliance.flows import record_codec
    from bench.pipeline_bench import settings

    frames = read_frames(Path(argv[2]))
    sampled = record_codec.sample_mask(SAMPLED_PROTOCOLS)
    ready = False
    while True:
        with tempfile.TemporaryDirectory() as tmp:
            config = settings(Path(tmp))
            config.paths.state_dir.mkdir(parents=True, exist_ok=True)
            stores = open_stores(config, batched_alerts=True)
            _, pipeline = build_analysis(config, stores, tls_views=False)
            tune_garbage_collector()
            if not ready:
                print("ready", flush=True)
                ready = True
            for frame in frames:
                pipeline.process_all(record_codec.decode(frame, sampled))
                stores.alerts.commit()
            stores.db.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
