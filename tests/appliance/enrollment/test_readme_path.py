"""The README's enrollment commands, run as written (curl), against a real appliance."""

import json
import shutil
import subprocess

import pytest


@pytest.mark.skipif(not shutil.which("curl"), reason="needs curl (installed by the Makefile)")
def test_readme_token_command_works_without_a_body(appliance):
    ca = appliance.app.ca.ca_cert_path
    out = subprocess.run(
        ["curl", "-sS", "--cacert", str(ca), "-H", f"Authorization: Bearer {appliance.rest.token}", "-X", "POST",
         f"https://localhost:{appliance.app.rest_port}/api/v1/agent/tokens"],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout
    reply = json.loads(out)
    assert set(reply) >= {"token", "command", "command_unix", "expires_at"}, reply


def test_a_chunked_token_request_is_411(appliance):
    import http.client
    import ssl
    ctx = ssl.create_default_context(cafile=str(appliance.app.ca.ca_cert_path))
    conn = http.client.HTTPSConnection("localhost", appliance.app.rest_port, context=ctx, timeout=10)
    conn.request("POST", "/api/v1/agent/tokens", body=iter([b"{}"]), encode_chunked=True,
                 headers={"Authorization": f"Bearer {appliance.rest.token}", "Transfer-Encoding": "chunked"})
    reply = conn.getresponse()
    assert reply.status == 411 and b"Content-Length" in reply.read()


def test_a_refused_token_cannot_forge_log_lines(appliance, caplog):
    import logging
    with caplog.at_level(logging.WARNING):
        status, _ = appliance.rest.get("/api/v1/enroll/linux?token=%0a%0dFAKE", token=None)
    assert status == 403
    refused = [r.getMessage() for r in caplog.records if "enrollment refused" in r.getMessage()]
    assert refused and all("\n" not in m and "\r" not in m for m in refused)
