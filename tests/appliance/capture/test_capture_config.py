"""`capture.*` keys: defaults, and bad values named with the key."""

from __future__ import annotations

import pytest

from appliance.config import parse_settings
from appliance.errors import ConfigError


def test_defaults_are_the_rfc1918_ranges_and_a_child_runner() -> None:
    capture = parse_settings({}).capture
    assert capture.internal_networks == ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"]
    assert capture.runner == "child" and capture.restart_backoff_initial == 0.5 and capture.restart_backoff_max == 30


def test_networks_are_normalised() -> None:
    assert parse_settings({"capture": {"internal_networks": ["10.1.2.3/16"]}}).capture.internal_networks == ["10.1.0.0/16"]


@pytest.mark.parametrize(("values", "named"), [
    ({"internal_networks": ["300.1.1.1/8"]}, "capture.internal_networks"),
    ({"internal_networks": ["fd00::/8"]}, "capture.internal_networks"),
    ({"internal_networks": "10.0.0.0/8"}, "capture.internal_networks"),
    ({"runner": "cron"}, "capture.runner"),
    ({"restart_backoff_initial": 0}, "capture.restart_backoff_initial"),
    ({"restart_backoff_initial": 10, "restart_backoff_max": 5}, "capture.restart_backoff_initial must not exceed"),
    ({"interface": "eth0"}, "capture.interface: unknown key"),
])
def test_bad_values_stop_start_up_naming_the_key(values: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_settings({"capture": values}, "config.yaml")
    assert named in str(err.value)
