"""Configuration: the enrollment-written file, flags on top, every problem reported at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.config import load_config
from agents.errors import ConfigError


def test_key_value_file_with_flag_overrides(tmp_path: Path) -> None:
    path = tmp_path / "agent.conf"
    path.write_text("# written by enrollment\ntarget: 10.99.0.1:50051\ncert = /etc/a.pem\n"
                    "interfaces: eth0, eth1\nsnaplen: 4096\nprocesses: no\n")
    config = load_config(path, {"snaplen": 512, "target": None})
    assert config.target == "10.99.0.1:50051"
    assert config.cert == "/etc/a.pem"
    assert config.interfaces == ("eth0", "eth1")
    assert config.snaplen == 512
    assert config.processes is False


def test_json_file(tmp_path: Path) -> None:
    path = tmp_path / "agent.json"
    path.write_text('{"target": "appliance:50051", "interfaces": ["eth0"], "batch_size": 10}')
    config = load_config(path, {})
    assert (config.target, config.interfaces, config.batch_size) == ("appliance:50051", ("eth0",), 10)


def test_every_bad_key_and_value_is_named_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "agent.conf"
    path.write_text("target: x:1\ncolour: blue\nsnaplen: big\nbatch_size: 5\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, {})
    message = str(err.value)
    assert "agent.conf:2: colour: unknown key" in message
    assert "agent.conf:3: snaplen: expected int (got 'big')" in message


def test_semantic_checks_name_the_value() -> None:
    with pytest.raises(ConfigError, match=r"target: must be host:port \(got 'nowhere'\)"):
        load_config(None, {"target": "nowhere"})
    with pytest.raises(ConfigError, match="snaplen: must be 64..262144"):
        load_config(None, {"snaplen": 10})


def test_the_file_enrollment_writes_is_understood(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text("# Written by the enrollment script; a re-enrollment rewrites it.\nproduct: SensorAgent\n"
                    "target_url: https://sensor.example:50051\nserver_name: sensor-appliance\n"
                    "machine_id: 0123abcd\nca_cert: /etc/sensor-agent/certs/ca.pem\n"
                    "cert: /etc/sensor-agent/certs/agent.pem\nkey: /etc/sensor-agent/certs/agent.key\n")
    config = load_config(path, {})
    assert (config.target, config.insecure, config.server_name) == ("sensor.example:50051", False, "sensor-appliance")
    assert config.machine_id == "0123abcd"
    with pytest.raises(ConfigError, match="target_url: must be https://host:port"):
        load_config(None, {"target_url": "ftp://x"})
