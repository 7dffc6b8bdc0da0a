"""The systemd unit, the launchd plist and the CI recipe say what the docs and enrollment expect."""

from __future__ import annotations

import configparser
import plistlib
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.agents.conftest import ROOT

UNIT = ROOT / "systemd" / "sensor-agent.service"


def unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(UNIT)
    return parser


def test_unit_is_hardened_to_cap_net_raw() -> None:
    service = unit()["Service"]
    assert service["ExecStart"] == "/usr/local/bin/sensor-agent --config /etc/sensor-agent/agent.yaml"
    assert service["CapabilityBoundingSet"] == service["AmbientCapabilities"] == "CAP_NET_RAW"
    assert service["NoNewPrivileges"] == "yes"
    assert service["ProtectSystem"] == "strict"
    assert "AF_PACKET" in service["RestrictAddressFamilies"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_unit_passes_systemd_analyze(tmp_path: Path) -> None:
    copy = tmp_path / "sensor-agent.service"
    copy.write_text(UNIT.read_text().replace("/usr/local/bin/sensor-agent", "/bin/true"))
    done = subprocess.run(["systemd-analyze", "verify", str(copy)], capture_output=True, text=True, timeout=60)
    problems = [line for line in done.stderr.splitlines() if "sensor-agent.service" in line]
    assert not problems, done.stderr


def test_launchd_plist_matches_enrollment() -> None:
    plist = plistlib.loads((ROOT / "packaging" / "macos" / "com.sensor.agent.plist").read_bytes())
    assert plist["Label"] == "com.sensor.agent"
    assert plist["ProgramArguments"] == ["/usr/local/bin/sensor-agent", "--config", "/etc/sensor-agent/agent.yaml"]
    assert plist["KeepAlive"] is True


def test_ci_builds_each_os_spec_and_pushes_to_the_artifact_endpoint() -> None:
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "agents.yml").read_text())
    matrix = workflow["jobs"]["build"]["strategy"]["matrix"]["include"]
    assert {(m["os"], m["arch"]) for m in matrix} == {("windows", "amd64"), ("macos", "amd64"), ("macos", "arm64")}
    for m in matrix:
        assert (ROOT / "packaging" / "pyinstaller" / f"sensor-agent-{m['os']}.spec").exists()
    steps = "\n".join(str(step.get("run", "")) for step in workflow["jobs"]["build"]["steps"])
    assert "/api/v1/artifacts" in steps and "sha256=" in steps
