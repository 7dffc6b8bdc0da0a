"""Agent tests: make sure the agents' own generated protobuf modules exist (they are gitignored)."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PCAPS = ROOT / "tests" / "fixtures" / "pcaps"
FIXTURES = ROOT / "tests" / "fixtures" / "agents"

if not (ROOT / "agents" / "generated" / "sensor_pb2.py").exists():
    subprocess.run(["make", "-s", "agents-gen"], cwd=ROOT, check=True)


def _newest_source_mtime() -> float:
    paths = [*(ROOT / "agents").rglob("*.py"), *(ROOT / "packaging" / "pyinstaller").glob("*")]
    return max(p.stat().st_mtime for p in paths)


@pytest.fixture(scope="session")
def frozen_agent() -> Path:
    """The one-file Linux agent built by `make agents` (rebuilt once per session when sources are newer)."""
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    binary = ROOT / "var" / "static" / "agents" / f"linux-{arch}" / "sensor-agent"
    if not binary.exists() or binary.stat().st_mtime < _newest_source_mtime():
        done = subprocess.run(["make", "-s", "agents"], cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return binary
