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
