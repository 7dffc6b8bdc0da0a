"""A real appliance plus a real dashboard in front of it, both on port 0, and an HTTPS client with a cookie jar."""

from __future__ import annotations

import http.client
import json
import ssl
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from appliance.config import parse_settings
from appliance.dashboard.app import Dashboard, build
from tests.conftest import RunningAppliance, appliance_settings, start_appliance

INDEX = "<!doctype html><html><head><title>console</title><script type=module src=/assets/app-1234.js></script></head></html>"


@dataclass
class Browser:
    """What a browser does for the console: HTTPS to port 3000, one cookie jar, the CSRF header on mutations."""

    port: int
    context: ssl.SSLContext
    cookie: str = ""
    csrf: str = ""
    last_headers: dict[str, str] = field(default_factory=dict)

    def request(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
                headers: dict[str, str] | None = None, csrf: bool = True) -> tuple[int, Any]:
        conn = http.client.HTTPSConnection("localhost", self.port, context=self.context, timeout=30)
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        sent = {"Content-Type": "application/json"} if data is not None else {}
        if self.cookie:
            sent["Cookie"] = f"console_session={self.cookie}"
        if csrf and self.csrf and method != "GET":
            sent["X-CSRF-Token"] = self.csrf
        sent.update(headers or {})
        try:
            conn.request(method, path, body=data, headers=sent)
            reply = conn.getresponse()
            payload = reply.read()
            self.last_headers = {k.lower(): v for k, v in reply.getheaders()}
        finally:
            conn.close()
        cookie = self.last_headers.get("set-cookie", "")
        if cookie.startswith("console_session="):
            self.cookie = cookie.split(";")[0].split("=", 1)[1]
        if "json" in self.last_headers.get("content-type", ""):
            return reply.status, json.loads(payload)
        return reply.status, payload

    def get(self, path: str, **kw: Any) -> tuple[int, Any]:
        return self.request("GET", path, **kw)

    def post(self, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        return self.request("POST", path, body, **kw)

    def login(self, username: str, password: str) -> tuple[int, Any]:
        status, body = self.post("/auth/login", {"username": username, "password": password})
        if status == 200:
            self.csrf = body["csrfToken"]
        return status, body


@dataclass
class Console:
    appliance: RunningAppliance
    dashboard: Dashboard
    context: ssl.SSLContext

    def browser(self) -> Browser:
        return Browser(self.dashboard.port, self.context)

    def admin(self) -> Browser:
        browser = self.browser()
        status, _ = browser.login("admin", self.dashboard.first_admin_password or "")
        assert status == 200
        return browser

    def analyst(self, name: str = "ana") -> Browser:
        if self.dashboard.users.get(name) is None:
            self.dashboard.users.create(name, "analyst-password-1", "analyst")
        browser = self.browser()
        assert browser.login(name, "analyst-password-1")[0] == 200
        return browser


def start_console(tmp: Path, appliance: RunningAppliance, **board: Any) -> Dashboard:
    dist = tmp / "dist"
    (dist / "assets").mkdir(parents=True, exist_ok=True)
    (dist / "index.html").write_text(INDEX)
    (dist / "assets" / "app-1234.js").write_text("console.log('console')")
    settings = appliance_settings(tmp)
    data = settings.model_dump(mode="json")
    data["dashboard"].update({"listen": "127.0.0.1:0", "api_url": f"https://localhost:{appliance.app.rest_port}",
                              "dist_dir": str(dist), "threads": 8, **board})
    dashboard = build(parse_settings(data, "test"))
    dashboard.start()
    return dashboard


@pytest.fixture
def console(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Console]:
    monkeypatch.delenv("SENSOR_ADMIN_TOKEN", raising=False)
    running = start_appliance(tmp_path)
    dashboard = start_console(tmp_path, running)
    context = ssl.create_default_context(cafile=str(running.app.ca.ca_cert_path))
    try:
        yield Console(running, dashboard, context)
    finally:
        dashboard.stop()
        running.app.stop()
