"""Agent tests: make sure the agents' own generated protobuf modules exist (they are gitignored)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PCAPS = ROOT / "tests" / "fixtures" / "pcaps"
FIXTURES = ROOT / "tests" / "fixtures" / "agents"

if not (ROOT / "agents" / "generated" / "sensor_pb2.py").exists():
    subprocess.run(["make", "-s", "agents-gen"], cwd=ROOT, check=True)
