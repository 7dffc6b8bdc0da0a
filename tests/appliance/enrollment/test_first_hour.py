"""Enrollment as a new admin meets it: the commands use the address the admin used, a loopback address is
flagged, a 409 says how to provide the agent, the Windows command checks elevation before it spends the token."""

from __future__ import annotations

import json
import re
import ssl
import urllib.request

import pytest

from appliance.enrollment.service import ELEVATION_CHECK, Endpoints, default_endpoints, request_host
from tests.appliance.enrollment.conftest import fetch_script, new_token, put_payload
from tests.conftest import RunningAppliance, start_appliance


def post_token(appliance: RunningAppliance, host_header: str) -> dict:
    """POST /api/v1/agent/tokens over real HTTPS to 127.0.0.1, with the Host header a client would send."""
    request = urllib.request.Request(f"https://127.0.0.1:{appliance.app.rest_port}/api/v1/agent/tokens", method="POST",
                                     headers={"Authorization": f"Bearer {appliance.app.admin_token}", "Host": host_header})
    context = ssl.create_default_context(cafile=str(appliance.app.ca.ca_cert_path))
    context.check_hostname = False  # the Host header below names other addresses on purpose
    with urllib.request.urlopen(request, context=context, timeout=10) as reply:
        return json.load(reply)


def test_commands_use_the_address_the_admin_reached(enrolling: RunningAppliance):
    reply = post_token(enrolling, "10.20.30.40:8443")
    assert reply["base_url"] == "https://10.20.30.40:8443"
    assert f"'https://10.20.30.40:8443/api/v1/enroll/windows?token={reply['token']}'" in reply["command"]
    assert '"https://10.20.30.40:8443/api/v1/enroll/$(uname -s' in reply["command_unix"]
    assert reply["warning"] is None
    # The script fetched through that address streams to the same host, on the gRPC port.
    status, script = fetch_script(enrolling, "linux", reply["token"])  # (the fixture's client reaches localhost)
    assert status == 200
    assert f"TARGET_URL='https://localhost:{enrolling.app.grpc_port}'" in script.decode()


def test_a_loopback_address_is_flagged_with_what_to_do(enrolling: RunningAppliance, caplog: pytest.LogCaptureFixture):
    for host in (f"localhost:{enrolling.app.rest_port}", f"127.0.0.1:{enrolling.app.rest_port}",
                 f"[::1]:{enrolling.app.rest_port}"):
        reply = post_token(enrolling, host)
        assert "only this machine can reach" in reply["warning"], host
        assert "enrollment.base_url" in reply["warning"]
    assert any("only this machine can reach" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("header", ["evil.example:8080/x", "a b", "x'y:1", "host:99999", "user@host:1", "", "[::1"])
def test_a_hostile_host_header_falls_back_to_the_server_name(header: str):
    assert request_host(header) == ""
    endpoints = default_endpoints("", "", "sensor-box", 8080, 50051, True, request_host(header))
    assert endpoints == Endpoints("https://sensor-box:8080", "https://sensor-box:50051")


def test_a_hostile_host_header_over_http_gets_the_default_address(enrolling: RunningAppliance):
    reply = post_token(enrolling, "x'; rm -rf /;'")
    assert reply["base_url"].startswith("https://") and "'" not in reply["base_url"][8:]


def test_configured_base_url_wins_over_the_host_header(tmp_path, monkeypatch):
    monkeypatch.delenv("SENSOR_ADMIN_TOKEN", raising=False)
    running = start_appliance(tmp_path, enrollment={"base_url": "https://appliance.corp.example:8443"})
    try:
        reply = post_token(running, "10.20.30.40:8443")
        assert reply["base_url"] == "https://appliance.corp.example:8443" and reply["warning"] is None
    finally:
        running.app.stop()


@pytest.mark.parametrize("os_kind, binary", [("windows", "sensor-agent.exe"), ("macos", "sensor-agent"),
                                             ("linux", "sensor-agent")])
def test_the_409_says_how_to_provide_the_agent(appliance: RunningAppliance, os_kind: str, binary: str):
    token = new_token(appliance)["token"]
    status, body = fetch_script(appliance, os_kind, token)
    assert status == 409 and body["code"] == "payload_missing"
    message = body["error"]
    assert f"filename=agents/{os_kind}-amd64/{binary}" in message and "/api/v1/artifacts" in message
    assert "SENSOR_DEPLOY_TOKEN" in message and "token stays usable" in message
    if os_kind == "linux":
        assert "make agents" in message
    else:
        assert f"packaging/pyinstaller/sensor-agent-{os_kind}.spec" in message
    put_payload(appliance)  # and the token indeed still works
    assert fetch_script(appliance, os_kind, token)[0] == 200


def _statements(command: str) -> list[str]:
    """The command's top-level PowerShell statements (split at `;` outside quotes, braces and parentheses)."""
    out, depth, quote, current = [], 0, "", ""
    for ch in command:
        current += ch
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "({":
            depth += 1
        elif ch in ")}":
            depth -= 1
        elif ch == ";" and depth == 0:
            out.append(current[:-1])
            current = ""
    return out + ([current] if current else [])


def test_windows_command_checks_elevation_before_it_fetches_anything(enrolling: RunningAppliance):
    """A non-elevated session: the check's branch is taken and throws before any statement touches the network,
    so the script (whose download spends the token) is never requested."""
    reply = new_token(enrolling)
    statements = _statements(reply["command"])
    assert statements[0] == "$ErrorActionPreference='Stop'"  # a throw ends the pasted line
    check = statements[1]
    assert check + ";" == ELEVATION_CHECK
    condition, body = re.fullmatch(r"if\((.*)\)\{(.*)\}", check).groups()
    assert condition == ("-not([Security.Principal.WindowsPrincipal][Security.Principal.WindowsIdentity]::GetCurrent())"
                         ".IsInRole([Security.Principal.WindowsBuiltInRole]::Administrator)")
    assert re.fullmatch(r"throw '[^']*'", body)  # the whole branch: nothing else runs in it
    assert "Run as administrator" in body and "the token is still valid" in body
    network = [i for i, s in enumerate(statements) if re.search(r"HttpWebRequest|GetResponse|WebClient|Invoke-", s)]
    assert network and min(network) > 1
    # The token was not spent by creating the command: a later, elevated paste still gets its script.
    assert fetch_script(enrolling, "windows", reply["token"])[0] == 200


def test_windows_command_shows_the_appliance_sentence_on_an_error_answer(enrolling: RunningAppliance):
    command = new_token(enrolling)["command"]
    assert "catch [Net.WebException]" in command and "$_.Exception.Response.GetResponseStream()" in command


def test_both_scripts_carry_the_payload_manifest_sha256_of_what_they_download(enrolling: RunningAppliance):
    manifest = {e.name: e.sha256 for e in enrolling.app.extras["artifacts"].scan().files.values()}
    for os_kind, agent in (("linux", "agents/linux-amd64/sensor-agent"),
                           ("windows", "agents/windows-amd64/sensor-agent.exe")):
        script = fetch_script(enrolling, os_kind, new_token(enrolling)["token"])[1].decode()
        assert f"{agent}={manifest[agent]}" in script
