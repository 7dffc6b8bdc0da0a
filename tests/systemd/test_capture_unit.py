"""sensor-capture.service: valid for systemd, only CAP_NET_RAW, hardened at least as well as the agent's unit."""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "systemd" / "sensor-capture.service"
needs_analyze = pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")


def section(name: str) -> configparser.SectionProxy:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(UNIT)
    return parser[name]


def runnable_copy(tmp: Path, source: Path, program: str) -> Path:
    copy = tmp / source.name
    copy.write_text(source.read_text().replace(program, "/bin/true"))
    return copy


def test_the_unit_holds_cap_net_raw_and_nothing_else() -> None:
    unit = section("Service")
    assert unit["CapabilityBoundingSet"] == "CAP_NET_RAW" and unit["AmbientCapabilities"] == "CAP_NET_RAW"
    assert unit["User"] == "sensor" and unit["NoNewPrivileges"] == "yes" and unit["ProtectSystem"] == "strict"
    assert "AF_PACKET" in unit["RestrictAddressFamilies"].split()
    assert unit["Restart"] == "always" and unit["UMask"] == "0077"


def test_the_unit_runs_the_capture_entry_point_on_the_appliances_control_directory() -> None:
    unit = section("Service")
    assert unit["ExecStart"].endswith("-m appliance.capture --control-dir /var/lib/sensor-appliance/capture")
    assert unit["StateDirectory"] == "sensor-appliance"


@needs_analyze
def test_the_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    copy = runnable_copy(tmp_path, UNIT, "/opt/sensor-appliance/venv/bin/python")
    done = subprocess.run(["systemd-analyze", "verify", str(copy)], capture_output=True, text=True, timeout=60)
    problems = [line for line in done.stderr.splitlines() if str(copy) in line]
    assert not problems, done.stderr


def exposure(path: Path) -> float:
    done = subprocess.run(["systemd-analyze", "security", "--offline=yes", str(path)], capture_output=True, text=True,
                          timeout=60)
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", done.stdout + done.stderr)
    assert found, done.stdout[-2000:] + done.stderr[-2000:]
    return float(found.group(1))


@needs_analyze
def test_the_security_score_is_low_and_no_worse_than_the_agents_unit(tmp_path: Path) -> None:
    capture = exposure(runnable_copy(tmp_path, UNIT, "/opt/sensor-appliance/venv/bin/python"))
    agent = exposure(runnable_copy(tmp_path, ROOT / "systemd" / "sensor-agent.service", "/usr/local/bin/sensor-agent"))
    assert capture <= 2.0, capture  # systemd rates up to 2.0 "OK"; a unit with no hardening scores 9.6
    assert capture <= agent, (capture, agent)


@needs_analyze
def test_the_score_does_rise_when_the_hardening_goes(tmp_path: Path) -> None:
    bare = tmp_path / "bare.service"
    bare.write_text("[Service]\nExecStart=/bin/true\nUser=sensor\n")
    assert exposure(bare) > 5.0
