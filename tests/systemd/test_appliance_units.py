"""The appliance's own units: valid for systemd, least privilege, and in step with the code."""

from __future__ import annotations

import configparser
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNITS = ("sensor-appliance.service", "sensor-reprovision.service")


def service(name: str) -> configparser.SectionProxy:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(ROOT / "systemd" / name)
    return parser["Service"]


@pytest.mark.parametrize("name", UNITS)
def test_units_run_unprivileged_with_nothing_extra(name: str) -> None:
    unit = service(name)
    assert unit["User"] == "sensor" and unit["NoNewPrivileges"] == "yes"
    assert unit["CapabilityBoundingSet"] == "" and unit["ProtectSystem"] == "strict"
    assert unit["StateDirectoryMode"] == "0700"
    assert unit["UMask"] == "0077"


def test_the_appliance_unit_is_notify_and_starts_the_entry_point() -> None:
    unit = service("sensor-appliance.service")
    assert unit["Type"] == "notify"
    assert unit["ExecStart"].endswith("-m appliance --config /etc/sensor-appliance/config.yaml")


def test_the_reprovisioner_sees_only_the_release_token_file() -> None:
    unit = service("sensor-reprovision.service")
    assert unit["Type"] == "oneshot"
    assert unit["EnvironmentFile"] == "-/etc/sensor-appliance/release.env"
    assert "-m appliance.reprovision" in unit["ExecStart"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
@pytest.mark.parametrize("name", UNITS)
def test_units_pass_systemd_analyze(tmp_path: Path, name: str) -> None:
    text = (ROOT / "systemd" / name).read_text()
    text = text.replace("/opt/sensor-appliance/venv/bin/python", "/bin/true")
    copy = tmp_path / name
    copy.write_text(text)
    done = subprocess.run(["systemd-analyze", "verify", str(copy)], capture_output=True, text=True, timeout=60)
    # systemd-analyze names the unit file on every line it objects to (unknown keys, bad values).
    problems = [line for line in done.stderr.splitlines() if str(copy) in line]
    assert not problems, done.stderr


def test_systemd_analyze_does_object_to_a_bad_key(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed")
    copy = tmp_path / "bad.service"
    copy.write_text("[Service]\nExecStart=/bin/true\nBogusKey=1\n")
    done = subprocess.run(["systemd-analyze", "verify", str(copy)], capture_output=True, text=True, timeout=60)
    assert any(str(copy) in line for line in done.stderr.splitlines())
