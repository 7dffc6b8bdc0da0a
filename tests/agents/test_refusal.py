"""An agent against an appliance that refuses it (real mTLS gRPC): a sentence and a non-zero exit, never success."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from agents import wire
from agents.cli import EXIT_INCOMPLETE, EXIT_REFUSED
from agents.config import Identity
from agents.model import OUTBOUND, CapturedPacket
from agents.stream import Connection, StreamClient, StreamTuning
from tests.agents.conftest import PCAPS, ROOT
from tests.appliance.enrollment.conftest import embedded, fetch_script, new_token, put_payload
from tests.conftest import RunningAppliance
from tests.polling import wait_for

TUNNEL = PCAPS / "dns-tunnel-txt-base64.pcap"


def enrolled_files(appliance: RunningAppliance, tmp: Path) -> dict[str, str]:
    """CA, certificate and key exactly as the enrollment script carries them (recorded in the store)."""
    put_payload(appliance)
    status, script = fetch_script(appliance, "linux", new_token(appliance)["token"])
    assert status == 200
    paths = {"ca_cert": tmp / "ca.pem", "cert": tmp / "agent.pem", "key": tmp / "agent.key"}
    for key, var in (("ca_cert", "CA_B64"), ("cert", "CERT_B64"), ("key", "KEY_B64")):
        paths[key].write_bytes(embedded(script.decode(), var))
    return {k: str(v) for k, v in paths.items()}


def replay(appliance: RunningAppliance, files: dict[str, str], machine_id: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "agents", "--pcap", str(TUNNEL), "--target", f"127.0.0.1:{appliance.app.grpc_port}",
           "--ca-cert", files["ca_cert"], "--cert", files["cert"], "--key", files["key"],
           "--server-name", "localhost", "--machine-id", machine_id]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_replay_with_a_certificate_bound_to_another_machine_fails_with_a_sentence(
        appliance: RunningAppliance, tmp_path: Path) -> None:
    files = enrolled_files(appliance, tmp_path)
    assert replay(appliance, files, "machine-a").returncode == 0  # binds the certificate to machine-a

    done = replay(appliance, files, "machine-b")
    assert done.returncode == EXIT_REFUSED, done.stderr
    summary = json.loads(done.stdout)
    assert summary["complete"] is False
    assert summary["failure"] == "PERMISSION_DENIED"
    assert "appliance_received" not in summary  # the appliance never acknowledged anything
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("sensor-agent: the import failed: ")
    assert "certificate is bound to another machine" in last and "Re-run enrollment on this machine" in last
    # Nothing of machine-b's replay reached the appliance.
    status, agents = appliance.rest.get("/api/v1/agents")
    assert status == 200 and len(agents["agents"]) == 1


def test_replay_with_a_revoked_certificate_fails_with_a_sentence(appliance: RunningAppliance, tmp_path: Path) -> None:
    files = enrolled_files(appliance, tmp_path)
    first = replay(appliance, files, "machine-a")
    agent_id = json.loads(first.stdout)["agent_id"]
    assert appliance.rest.post(f"/api/v1/agents/{agent_id}/revoke")[0] == 200
    done = replay(appliance, files, "machine-a")
    assert done.returncode == EXIT_REFUSED, done.stderr
    assert "certificate revoked" in done.stderr and "Re-run enrollment" in done.stderr


def test_replay_against_no_appliance_exits_non_zero_and_says_what_to_check(tmp_path: Path,
                                                                              appliance: RunningAppliance) -> None:
    files = enrolled_files(appliance, tmp_path)
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmd = [sys.executable, "-m", "agents", "--pcap", str(TUNNEL), "--target", f"127.0.0.1:{port}",
           "--ca-cert", files["ca_cert"], "--cert", files["cert"], "--key", files["key"], "--server-name", "localhost"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == EXIT_INCOMPLETE, done.stderr
    assert json.loads(done.stdout)["failure"] == "UNREACHABLE"
    assert "Check the address and port" in done.stderr.strip().splitlines()[-1]


def test_live_stream_logs_a_permanent_refusal_and_backs_off(appliance: RunningAppliance, tmp_path: Path,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    files = enrolled_files(appliance, tmp_path)
    assert replay(appliance, files, "machine-a").returncode == 0
    connection = Connection(f"127.0.0.1:{appliance.app.grpc_port}", Path(files["ca_cert"]).read_bytes(),
                            Path(files["cert"]).read_bytes(), Path(files["key"]).read_bytes(), "localhost")
    identity = Identity("machine-b", "host-b", "linux", "test")
    client: StreamClient[CapturedPacket] = StreamClient(
        "packets", connection, identity, lambda stub: stub.StreamPacketBatches, wire.packet_batch,  # type: ignore[arg-type]
        StreamTuning(batch_size=1, flush_interval=0.05, refused_backoff=300.0))
    packet = CapturedPacket(1_700_000_000_000, OUTBOUND, 0x0A000001, 0x08080808, 40000, 53, 17, 60, b"x")
    with caplog.at_level(logging.ERROR, logger="agents.stream"):
        client.start()
        client.submit(packet)
        assert wait_for(lambda: client.refusals == 1 and client.failure is not None), client.stats()
        failure = client.failure
        assert failure is not None and failure.permanent and failure.code == "PERMISSION_DENIED"
        # Visible (ERROR, once, with the wait) and not hammering: still one refusal after a while.
        assert wait_for(lambda: any("refused permanently" in r.getMessage() for r in caplog.records))
        submitted_streams = client.streams_opened
        client.submit(packet)
        assert not wait_for(lambda: client.streams_opened > submitted_streams, timeout=1.5)
        assert client.refusals == 1
        [record] = [r for r in caplog.records if "refused permanently" in r.getMessage()]
        assert "next attempt in 300 s" in record.getMessage() and "Re-run enrollment" in record.getMessage()
    assert client.close(timeout=1.0) is False  # it was waiting out the refusal backoff; close gives up promptly
