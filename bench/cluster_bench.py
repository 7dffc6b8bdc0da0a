"""Cluster benchmark: flows/s of ONE analyzer fed through Redis Streams against the same analysis fed
through the local channel (the standalone analysis process). Medians of several rounds.

Both sides get the pipeline bench's corpus (20 office agents x 30 minutes plus every attack scenario)
as the server's flow table hands it over (`hand_overs`: the DNS answers the resolver cache learns from, ahead of
the ended flows that follow them, records already in the contract's encoding; the few Python held, ICMP, as
FlowRecords), all at once, by the sending side in this process:
- local channel: `AnalysisProcess` (the outbox, the sender thread, the socketpair, `python -m
  appliance.analysis.worker`), timed until its drain confirms every flow analysed;
- Redis: an ingest node's `RedisSink` appends to the partition streams of a real redis-server started
  here, and one analyzer (`python -m appliance`, `cluster.role: analyzer`, holding every partition)
  reads, dedupes, analyses and commits, timed until the partitions' counters say every flow analysed.
And one ingest node (in this process, plaintext gRPC) taking the corpus's packets with its ended flows
going to Redis, against the same node with analysis off. Figures go to stdout and to
var/bench/cluster.txt and var/bench/cluster.json.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import release_round, write_figures

ROOT = Path(__file__).resolve().parent.parent
ROUNDS = 5
PARTITIONS = 16


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_redis(directory: Path) -> tuple[subprocess.Popen[bytes], str]:
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    port = free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory), "--save", "",
                             "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, f"redis://127.0.0.1:{port}/0"
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("redis-server did not start")


def bench_settings(tmp: Path, **cluster: Any) -> Any:
    from appliance.config import parse_settings
    from bench.pipeline_bench import settings

    base = settings(tmp).model_dump(mode="json")
    base["analysis"]["worker"] = "process"
    base["cluster"] = {"partitions": PARTITIONS, **cluster}
    return parse_settings(base, "bench")


def flow_count(hand_overs: list[tuple[bytes, list]]) -> int:
    from appliance.analysis.channel import FLOWS

    return sum(len(items) for kind, items in hand_overs if kind == FLOWS)


def hand_over(sink: Any, hand_overs: list[tuple[bytes, list]]) -> None:
    """Into an analysis sink as the flow table delivers them: answers with observe_answers, flows with submit_many."""
    from appliance.analysis.channel import DNS

    for kind, items in hand_overs:
        if kind == DNS:
            sink.observe_answers(items)
        else:
            sink.submit_many(items)


def local_round(hand_overs: list[tuple[bytes, list]]) -> float:
    from appliance.analysis.process import AnalysisProcess

    flows = flow_count(hand_overs)
    with tempfile.TemporaryDirectory() as tmp:
        settings = bench_settings(Path(tmp))
        analysis = AnalysisProcess(settings, queue_size=flows + 1)
        analysis.spawn()
        analysis.start()
        try:
            deadline = time.monotonic() + 120
            while not analysis.status()["running"] and time.monotonic() < deadline:
                time.sleep(0.05)
            start = time.perf_counter()
            hand_over(analysis, hand_overs)
            assert analysis.drain(600), "the analysis process did not drain"
            elapsed = time.perf_counter() - start
            assert analysis.counter("flows_processed") == flows and analysis.flows_dropped == 0
            assert analysis.dns_dropped == 0
            return flows / elapsed
        finally:
            analysis.stop()


def redis_round(hand_overs: list[tuple[bytes, list]], redis_url: str) -> float:
    import redis

    from appliance.cluster import bus
    from appliance.cluster.ingest import RedisSink

    flows = flow_count(hand_overs)
    client = redis.Redis.from_url(redis_url)
    client.flushall()
    with tempfile.TemporaryDirectory() as tmp:
        settings = bench_settings(Path(tmp), role="analyzer", redis_url=redis_url, node_id="bench-analyzer")
        config = Path(tmp) / "analyzer.json"
        config.write_text(settings.model_dump_json())
        analyzer = subprocess.Popen([sys.executable, "-m", "appliance", "--config", str(config), "--log-level", "WARNING"],
                                    cwd=ROOT, stdout=subprocess.DEVNULL)
        sink = RedisSink(settings.model_copy(update={"cluster": settings.cluster.model_copy(update={"role": "ingest"})}),
                         queue_size=flows + 1)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:  # ready: the analyzer holds every partition
                if all(client.get(bus.lease_key(p)) for p in range(PARTITIONS)):
                    break
                time.sleep(0.05)
            else:
                raise RuntimeError("the analyzer did not take the partitions")
            sink.start()
            start = time.perf_counter()
            hand_over(sink, hand_overs)
            while True:
                totals = bus.partition_counts(client, PARTITIONS)
                if totals.get("analysed", 0) >= flows:
                    break
                if analyzer.poll() is not None:
                    raise RuntimeError(f"the analyzer exited with {analyzer.returncode}")
                time.sleep(0.005)
            elapsed = time.perf_counter() - start
            assert totals["analysed"] == totals["added"] == flows and not totals.get("duplicates")
            assert sink.dns_dropped == 0 and sink.flows_dropped == 0  # every answer and flow went to Redis
            return flows / elapsed
        finally:
            sink.stop()
            analyzer.send_signal(signal.SIGTERM)
            analyzer.wait(60)


def ingest_round(streams: list[tuple[str, list]], redis_url: str | None) -> float:
    """Packets/s an ingest node takes over gRPC (plaintext, in this process) with its ended flows going to
    Redis (`redis_url`), or with analysis off (None: the baseline), until every flow is handed over."""
    import grpc
    import redis

    from appliance.app import build, tune_garbage_collector
    from appliance.config import parse_settings
    from appliance.generated import sensor_pb2, sensor_pb2_grpc

    with tempfile.TemporaryDirectory() as tmp:
        base = bench_settings(Path(tmp)).model_dump(mode="json")
        base["grpc"]["tls"] = False
        base["limits"]["analysis_queue"] = 1_000_000
        if redis_url is None:
            base["analysis"]["worker"] = "off"
        else:
            redis.Redis.from_url(redis_url).flushall()
            base["cluster"].update(role="ingest", redis_url=redis_url)
        app = build(parse_settings(base, "bench"))
        app.start()
        tune_garbage_collector()
        channel = grpc.insecure_channel(f"127.0.0.1:{app.grpc_port}")
        try:
            stub = sensor_pb2_grpc.SensorServiceStub(channel)
            batches = [(agent, [sensor_pb2.PacketBatch(packets=p[i : i + 500]) for i in range(0, len(p), 500)])
                       for agent, p in streams]
            total = sum(len(p) for _, p in streams)
            start = time.perf_counter()
            for agent, items in batches:
                stub.StreamPacketBatches(iter(items), metadata=[("x-machine-id", agent)])
            assert app.analysis.drain(120)
            elapsed = time.perf_counter() - start
            if redis_url is not None:
                assert app.analysis.flows_appended == app.tracker.flows_created and app.analysis.flows_dropped == 0
            return total / elapsed
        finally:
            channel.close()
            app.stop()
            release_round()


def main() -> None:
    logging.disable(logging.WARNING)
    sys.path.insert(0, str(ROOT))
    from bench.pipeline_bench import corpus, hand_overs

    streams = corpus()
    packets = sum(len(p) for _, p in streams)
    handed = hand_overs(streams)
    flows = flow_count(handed)
    local = statistics.median(local_round(handed) for _ in range(ROUNDS))
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_redis(Path(tmp))
        try:
            over_redis = statistics.median(redis_round(handed, url) for _ in range(ROUNDS))
            ingest = statistics.median(ingest_round(streams, url) for _ in range(ROUNDS))
            alone = statistics.median(ingest_round(streams, None) for _ in range(ROUNDS))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(10)
    line = (f"one analyzer, {flows} flows of the pipeline corpus: through the local channel {local:,.0f} flows/s, "
            f"through Redis Streams {over_redis:,.0f} flows/s (ratio {over_redis / local:.2f}; median of {ROUNDS}; "
            f"{os.cpu_count()} cores)")
    ingest_line = (f"one ingest node, the corpus's {packets} packets over plaintext gRPC: flows to Redis {ingest:,.0f} "
                   f"packets/s, analysis off {alone:,.0f} packets/s (ratio {ingest / alone:.2f}; median of {ROUNDS})")
    print(line, flush=True)
    print(ingest_line, flush=True)
    figures = {"flows": flows, "packets": packets, "rounds": ROUNDS, "partitions": PARTITIONS,
               "flows_per_s": {"local_channel": round(local), "redis_streams": round(over_redis)},
               "ratio_redis_to_local": round(over_redis / local, 3),
               "ingest_packets_per_s": {"to_redis": round(ingest), "analysis_off": round(alone)},
               "ratio_ingest_to_redis_vs_off": round(ingest / alone, 3)}
    write_figures("cluster", [line, ingest_line], figures)


if __name__ == "__main__":
    main()
