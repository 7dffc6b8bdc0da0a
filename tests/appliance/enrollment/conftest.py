"""Helpers for enrollment tests: a payload in /static, tokens, scripts and what they embed."""

from __future__ import annotations

import base64
import re
from io import BytesIO
from typing import Any

import pytest
from cryptography import x509

from tests.conftest import RunningAppliance

AGENT_LINUX = b"#!/bin/sh\necho sensor-agent linux\n"
AGENT_WINDOWS = b"MZ fake windows agent"


def put_payload(appliance: RunningAppliance, *, driver: bool = False) -> None:
    """Agent binaries for every system (and optionally the driver) in the appliance's /static."""
    store = appliance.app.artifacts
    store.put("agents/linux-amd64/sensor-agent", BytesIO(AGENT_LINUX), version="1.0.0")
    store.put("agents/linux-arm64/sensor-agent", BytesIO(AGENT_LINUX), version="1.0.0")
    store.put("agents/macos-arm64/sensor-agent", BytesIO(b"macho"), version="1.0.0")
    store.put("agents/windows-amd64/sensor-agent.exe", BytesIO(AGENT_WINDOWS), version="1.0.0")
    if driver:
        for ext in ("sys", "inf", "cat", "cer"):
            store.put(f"driver/sensor-driver.{ext}", BytesIO(f"driver {ext}".encode()), version="1.0.0")


@pytest.fixture
def enrolling(appliance: RunningAppliance) -> RunningAppliance:
    """The running appliance with an agent payload in /static."""
    put_payload(appliance)
    return appliance


def new_token(appliance: RunningAppliance, **body: Any) -> dict[str, Any]:
    status, reply = appliance.rest.post("/api/v1/agent/tokens", body or None)
    assert status == 200, reply
    return reply


def fetch_script(appliance: RunningAppliance, os_kind: str, token: str) -> tuple[int, Any]:
    return appliance.rest.get(f"/api/v1/enroll/{os_kind}?token={token}", token=None)


def embedded(script: str, name: str) -> bytes:
    """A base64 value the script embeds, by its variable name (PowerShell `$Name = '...'` or sh `NAME='...'`)."""
    match = re.search(r"(?:\$%s\s*=\s*|\b%s=)'([A-Za-z0-9+/=]+)'" % (name, name), script)
    assert match, f"{name} not embedded"
    return base64.b64decode(match.group(1))


def embedded_cert(script: str, name: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(embedded(script, name))
