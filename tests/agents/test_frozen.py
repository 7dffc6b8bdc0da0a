"""The frozen Linux agent runs with no Python environment of ours: --version, and --pcap into an appliance."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.agents.conftest import PCAPS
from tests.agents.test_stream import agent_files
from tests.conftest import RunningAppliance

pytestmark = pytest.mark.slow

BARE_ENV = {"PATH": "/usr/bin:/bin"}  # no PYTHONPATH, no virtualenv, no HOME


def test_frozen_agent_reports_its_version(frozen_agent: Path) -> None:
    done = subprocess.run([str(frozen_agent), "--version"], env=BARE_ENV, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, "sensor-agent 0.1.0")


def test_frozen_agent_replays_a_capture_into_the_appliance(frozen_agent: Path, appliance: RunningAppliance,
                                                          tmp_path: Path) -> None:
    files = agent_files(appliance, tmp_path)
    cmd = [str(frozen_agent), "--pcap", str(PCAPS / "icmp-ping-and-ssh-benign.pcap"), "--local-ip", "192.168.0.30",
           "--target", f"127.0.0.1:{appliance.app.grpc_port}", "--server-name", "localhost",
           "--ca-cert", files["ca_cert"], "--cert", files["cert"], "--key", files["key"], "--machine-id", "frozen-1"]
    done = subprocess.run(cmd, env=BARE_ENV, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["appliance_received"] == summary["decoded"] == 362
    status, body = appliance.rest.get(f"/api/v1/agents/{summary['agent_id']}")
    assert status == 200 and body["packets_received"] == 362


def test_frozen_agent_dry_run_prints_packets(frozen_agent: Path) -> None:
    done = subprocess.run([str(frozen_agent), "--pcap", str(PCAPS / "dns-benign-a-aaaa-mx.pcap"), "--dry-run"],
                          env=BARE_ENV, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 6 and lines[0].startswith("ts=1494364058364 udp 10.16.1.11:55398 -> 8.8.8.8:53 size=67")
