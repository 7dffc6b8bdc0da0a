"""Streaming to a real appliance (mTLS gRPC on port 0): replay, batching, reconnect, drop-oldest."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agents import wire
from agents.agent import RunOptions, build
from agents.config import AgentConfig, Identity
from agents.decode import Decoder, DirectionResolver
from agents.model import OUTBOUND, CapturedPacket, ip_int
from agents.pcapfile import read_capture
from agents.stream import Connection, StreamClient, StreamTuning
from tests.agents.conftest import PCAPS, ROOT
from tests.agents.frames import pcapng_bytes
from tests.conftest import RunningAppliance, start_appliance
from tests.polling import wait_for

TUNNEL = PCAPS / "dns-tunnel-txt-base64.pcap"


def agent_files(running: RunningAppliance, tmp: Path, cn: str = "sensor-agent-lab001") -> dict[str, str]:
    """Certificate, key and CA written where an enrolled agent keeps them."""
    issued = running.app.ca.issue_agent(cn)
    paths = {"ca_cert": tmp / "ca.pem", "cert": tmp / "agent.pem", "key": tmp / "agent.key"}
    paths["ca_cert"].write_bytes(running.app.ca.ca_pem)
    paths["cert"].write_bytes(issued.cert_pem)
    paths["key"].write_bytes(issued.key_pem)
    return {k: str(v) for k, v in paths.items()}


def agent_flows(running: RunningAppliance, agent_id: str) -> list[dict[str, Any]]:
    status, body = running.rest.get(f"/api/v1/flows?agent_id={agent_id}&limit=1000")
    assert status == 200
    return body["flows"]


def test_cli_pcap_replay_reaches_the_appliance_with_exact_counts(appliance: RunningAppliance, tmp_path: Path) -> None:
    files = agent_files(appliance, tmp_path)
    cmd = [sys.executable, "-m", "agents", "--pcap", str(TUNNEL), "--target", f"127.0.0.1:{appliance.app.grpc_port}",
           "--ca-cert", files["ca_cert"], "--cert", files["cert"], "--key", files["key"],
           "--server-name", "localhost", "--machine-id", "replay-machine-1", "--hostname", "evidence-box"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["complete"] is True
    assert summary["decoded"] == summary["sent"] == summary["appliance_received"] == 164
    agent_id = summary["agent_id"]

    status, body = appliance.rest.get(f"/api/v1/agents/{agent_id}")
    assert status == 200
    assert (body["hostname"], body["os"], body["packets_received"]) == ("evidence-box", "linux", 164)

    replayed = Decoder(DirectionResolver(infer=True))
    expected = [p for f in read_capture(TUNNEL) if (p := replayed.decode(f.linktype, f.data, f.timestamp_ns))]
    tunnel = [p for p in expected if p.remote_port == 53]

    def dns_records() -> list[dict[str, Any]]:
        records = [f for f in agent_flows(appliance, agent_id) if f["remote_port"] == 53]
        return records if sum(f["packets_out"] + f["packets_in"] for f in records) == len(tunnel) else []

    # The appliance may cut one conversation into several records (idle gaps in event time): sum them.
    records = wait_for(dns_records)
    assert records, agent_flows(appliance, agent_id)
    assert {(f["local_ip"], f["local_port"], f["remote_ip"], f["transport"]) for f in records} == \
        {("10.30.28.90", 43246, "10.30.28.94", "udp")}
    first = next(read_capture(TUNNEL)).timestamp_ns
    earliest = min(f["first_seen"] for f in records)
    assert earliest.startswith(time.strftime("%Y-%m-%dT%H:%M", time.gmtime(first / 1e9)))  # original time
    assert sum(f["packets_out"] for f in records) == sum(1 for p in tunnel if p.direction == OUTBOUND) == 81
    assert sum(f["bytes_out"] for f in records) == sum(p.size for p in tunnel if p.direction == OUTBOUND)
    assert sum(f["packets_in"] for f in records) == 80
    assert sum(f["bytes_in"] for f in records) == sum(p.size for p in tunnel if p.direction != OUTBOUND)


def test_pcapng_replay_streams_every_packet(appliance: RunningAppliance, tmp_path: Path) -> None:
    files = agent_files(appliance, tmp_path)
    capture = tmp_path / "ping.pcapng"
    frames = [(f.timestamp_ns, f.data) for f in read_capture(PCAPS / "icmp-ping-and-ssh-benign.pcap")]
    capture.write_bytes(pcapng_bytes(frames))
    config = AgentConfig(target=f"127.0.0.1:{appliance.app.grpc_port}", server_name="localhost",
                         machine_id="pcapng-machine", batch_size=50, **files)
    agent = build(config, RunOptions(pcap=capture, local_ips=("192.168.0.30",)))
    summary = agent.replay()
    assert summary["complete"] is True
    assert summary["appliance_received"] == summary["decoded"] == 362
    assert agent.packets is not None and agent.packets.streams_opened == 1


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def packet(n: int) -> CapturedPacket:
    return CapturedPacket(int(time.time() * 1000), OUTBOUND, ip_int("10.0.0.5"), ip_int("10.0.0.9"),
                          20000 + n, 80, 6, 40, b"", 0x10)


def client(target: str, running: RunningAppliance, tmp: Path, **tuning: Any) -> StreamClient[CapturedPacket]:
    files = agent_files(running, tmp)
    connection = Connection(target, Path(files["ca_cert"]).read_bytes(), Path(files["cert"]).read_bytes(),
                            Path(files["key"]).read_bytes(), server_name="localhost", connect_timeout=0.5)
    identity = Identity("reconnect-machine", "box", "linux", "test")
    settings = {"batch_size": 20, "flush_interval": 0.05, "queue_size": 100, "backoff_initial": 0.05,
                "backoff_max": 0.2, **tuning}
    return StreamClient("packets", connection, identity, lambda stub: stub.StreamPacketBatches,
                        wire.packet_batch, StreamTuning(**settings))


@pytest.fixture
def restartable(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    yield tmp_path / "appliance", free_port()


def test_survives_the_appliance_going_away_drops_oldest_and_reports(restartable: tuple[Path, int],
                                                                     tmp_path: Path) -> None:
    home, port = restartable
    first = start_appliance(home, grpc={"listen": f"127.0.0.1:{port}"})
    stream = client(f"127.0.0.1:{port}", first, tmp_path).start()
    try:
        for n in range(30):
            stream.submit(packet(n))
        assert wait_for(lambda: first.app.agents.all() and first.app.agents.all()[0].packets_received == 30)
        agent_id = first.app.agents.all()[0].agent_id
    finally:
        first.app.stop()

    # The appliance is away: submitting never blocks, the queue keeps the newest 100.
    started = time.monotonic()
    for n in range(30, 330):
        stream.submit(packet(n))
    assert time.monotonic() - started < 5  # a blocking submit would wait for a reconnect that cannot come
    assert wait_for(lambda: stream.failures >= 2, 30)
    assert stream.dropped >= 200 - 20  # up to one batch may have left with the broken stream

    second = start_appliance(home, grpc={"listen": f"127.0.0.1:{port}"})
    try:
        assert wait_for(lambda: stream.streams_opened >= 2 and stream.queued == 0, 30)
        assert stream.close(timeout=10)
        received, _rejected, reply_agent = stream.last_reply or (0, 0, "")
        assert reply_agent == agent_id
        kept = second.app.agents.get(agent_id)
        assert kept is not None and kept.packets_received == received
        # At most once: what was neither dropped nor delivered left with the dying stream (one batch at most).
        lost_in_flight = 300 - stream.dropped - received
        assert 0 <= lost_in_flight <= 20
    finally:
        second.app.stop()


def test_queue_is_bounded_and_drops_the_oldest_without_blocking(appliance: RunningAppliance, tmp_path: Path) -> None:
    stream = client(f"127.0.0.1:{free_port()}", appliance, tmp_path, queue_size=10, batch_size=5)
    for n in range(100):
        stream.submit(packet(n))
    assert (stream.dropped, stream.queued) == (90, 10)
    assert [p.local_port for p in stream._queue] == list(range(20090, 20100))  # the newest survive
