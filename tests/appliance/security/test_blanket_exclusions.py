"""Item 7: an exclusion that switches all detection off (`0.0.0.0/0`, `::/0`, a public suffix)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("value", ["0.0.0.0/0", "::/0", "0.0.0.0/1", "co.uk"])
def test_a_blanket_exclusion_is_refused_unless_confirmed(appliance, value):
    status, body = appliance.rest.post("/api/v1/whitelist", {"value": value})
    assert status == 422 and body["code"] == "BLANKET_EXCLUSION" and body["field"] == "value", body
    assert "confirm_blanket" in body["error"]
    assert appliance.rest.get("/api/v1/whitelist")[1]["count"] == 0
    assert appliance.rest.get("/api/status", token=None)[1]["warnings"] == []


@pytest.mark.parametrize("value", ["10.0.0.0/8", "fc00::/7", "192.168.0.0/16", "example.co.uk"])
def test_ordinary_wide_exclusions_need_no_confirmation(appliance, value):
    status, body = appliance.rest.post("/api/v1/whitelist", {"value": value})
    assert status == 201 and body["blanket"] is False, body


def test_a_confirmed_blanket_exclusion_is_warned_about_in_status_and_metrics(appliance):
    status, entry = appliance.rest.post("/api/v1/whitelist", {"value": "::/0", "confirm_blanket": True})
    assert status == 201 and entry["blanket"] is True
    (warning,) = appliance.rest.get("/api/status", token=None)[1]["warnings"]
    assert "::/0" in warning
    assert appliance.rest.get("/api/v1/metrics")[1]["blanket_exclusions"] == 1
    assert appliance.rest.call("DELETE", f"/api/v1/whitelist/{entry['id']}")[0] == 200
    assert appliance.rest.get("/api/status", token=None)[1]["warnings"] == []
    assert appliance.rest.get("/api/v1/metrics")[1]["blanket_exclusions"] == 0
