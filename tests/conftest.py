"""Fixtures shared by the whole suite: a running appliance on port 0, an enrolled gRPC client."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from appliance.app import Appliance, build
from appliance.config import parse_settings
from appliance.generated import sensor_pb2_grpc
from tests.agents.netns import Lab, lab_available


@dataclass
class Rest:
    """A tiny HTTPS client for the appliance's REST API (real HTTP, CA-verified)."""

    base: str
    token: str
    context: ssl.SSLContext | None

    def call(self, method: str, path: str, body: Any = None, *, token: str | None = "default",
             raw: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        request = urllib.request.Request(self.base + path, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        bearer = self.token if token == "default" else token
        if bearer:
            request.add_header("Authorization", f"Bearer {bearer}")
        for key, value in (headers or {}).items():
            request.add_header(key, value)
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=30) as reply:
                status, payload, ctype = reply.status, reply.read(), reply.headers.get("Content-Type", "")
        except urllib.error.HTTPError as err:
            status, payload, ctype = err.code, err.read(), err.headers.get("Content-Type", "")
        if "json" in ctype:
            return status, json.loads(payload)
        return status, payload

    def get(self, path: str, **kw: Any) -> tuple[int, Any]:
        return self.call("GET", path, **kw)

    def post(self, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        return self.call("POST", path, body, **kw)


def appliance_settings(tmp: Path, **overrides: Any) -> Any:
    """Settings for a test appliance: everything under `tmp`, ports 0, loopback only."""
    data: dict[str, Any] = {
        "grpc": {"listen": "127.0.0.1:0"},
        # check_replies: every reply a test provokes is held to its route's declared model
        "rest": {"listen": "127.0.0.1:0", "threads": 8, "check_replies": True},
        "paths": {
            "state_dir": str(tmp / "state"),
            "signatures_dir": str(tmp / "signatures"),
            "static_dir": str(tmp / "static"),
            "certs_dir": str(tmp / "certs"),
        },
        "tls": {"server_names": ["localhost", "127.0.0.1"]},
        "metrics": {"history_interval": 0.05},
        # In-process analysis: tests reach into the layers (app.detection, app.pipeline). The analysis
        # process, the default, has its own tests (tests/appliance/analysis/) and runs wherever the
        # appliance is started as `python -m appliance` (README enrollment, package, image, benchmarks).
        "analysis": {"worker": "thread"},
    }
    for section, values in overrides.items():
        data.setdefault(section, {}).update(values)
    return parse_settings(data, "test")


@dataclass
class RunningAppliance:
    app: Appliance
    rest: Rest
    tmp: Path

    def channel(self, with_cert: bool = True, cert: tuple[bytes, bytes] | None = None) -> grpc.Channel:
        """A gRPC channel to the appliance: mTLS with a fresh agent certificate unless told otherwise."""
        target = f"127.0.0.1:{self.app.grpc_port}"
        if not self.app.settings.grpc.tls:
            return grpc.insecure_channel(target)
        key_pem = cert_pem = None
        if cert is not None:
            cert_pem, key_pem = cert
        elif with_cert:
            issued = self.app.ca.issue_agent("sensor-agent-test00")
            cert_pem, key_pem = issued.cert_pem, issued.key_pem
        creds = grpc.ssl_channel_credentials(self.app.ca.ca_pem, key_pem, cert_pem)
        return grpc.secure_channel(target, creds, options=[("grpc.ssl_target_name_override", "localhost")])

    def stub(self, **kw: Any) -> sensor_pb2_grpc.SensorServiceStub:
        return sensor_pb2_grpc.SensorServiceStub(self.channel(**kw))


def start_appliance(tmp: Path, **overrides: Any) -> RunningAppliance:
    settings = appliance_settings(tmp, **overrides)
    app = build(settings)
    app.start()
    context = None
    scheme = "http"
    if settings.rest.tls:
        scheme = "https"
        context = ssl.create_default_context(cafile=str(app.ca.ca_cert_path))
    rest = Rest(f"{scheme}://localhost:{app.rest_port}", app.admin_token, context)
    return RunningAppliance(app, rest, tmp)


@pytest.fixture
def appliance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RunningAppliance]:
    """A started appliance with default settings (mTLS gRPC, HTTPS REST) in a temp dir."""
    monkeypatch.delenv("SENSOR_ADMIN_TOKEN", raising=False)
    running = start_appliance(tmp_path)
    try:
        yield running
    finally:
        running.app.stop()


@pytest.fixture
def lab() -> Iterator[Lab]:
    """A network-namespace lab of its own for one test (tests/agents/netns.py), closed after it."""
    reason = lab_available()
    if reason:
        pytest.skip(reason)
    lab = Lab.create()
    try:
        yield lab
    finally:
        lab.close()
