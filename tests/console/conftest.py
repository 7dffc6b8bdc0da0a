"""A real appliance (shipped rules, alerts raised by real gRPC traffic) behind a real dashboard serving the
built console, and headless Chromium from Debian driven by Playwright."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from appliance.config import parse_settings
from appliance.dashboard.app import Dashboard, build
from tests.appliance.detection import scenarios as sc
from tests.appliance.detection.conftest import alerts_of, start_detecting
from tests.conftest import RunningAppliance, appliance_settings

ROOT = Path(__file__).resolve().parents[2]
DIST = ROOT / "console" / "dist"
AXE = ROOT / "console" / "node_modules" / "axe-core" / "axe.min.js"
ARTIFACTS = ROOT / "var" / "artifacts" / "console"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
ANALYST_PASSWORD = "analyst-password-1"


@dataclass
class Stack:
    appliance: RunningAppliance
    dashboard: Dashboard
    url: str
    admin_password: str
    traffic_stop: threading.Event = field(default_factory=threading.Event)

    def alerts(self, **filters: str) -> list[dict[str, Any]]:
        return alerts_of(self.appliance, **filters)


def _background_traffic(stack: Stack) -> None:
    """Benign office traffic from a second agent, a slice every half second, so the live metrics move."""
    stub = stack.appliance.stub()
    n = 0
    while not stack.traffic_stop.wait(0.5) and n < 400:
        sc.stream(stub, sc.benign_office(7, minutes=1.0, start_ms=sc.T0_MS + n * 60_000, seed=n))
        n += 1


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    assert (DIST / "index.html").is_file(), "console/dist is not built: run `make console`"
    os.environ.pop("SENSOR_ADMIN_TOKEN", None)
    tmp = tmp_path_factory.mktemp("console")
    running = start_detecting(tmp)
    stub = running.stub()
    sc.stream(stub, sc.iodine_tunnel())
    sc.stream(stub, sc.raw_ip_tls())
    data = appliance_settings(tmp).model_dump(mode="json")
    data["dashboard"].update({"listen": "127.0.0.1:0", "api_url": f"https://localhost:{running.app.rest_port}",
                              "dist_dir": str(DIST), "threads": 8})
    dashboard = build(parse_settings(data, "test"))
    dashboard.start()
    stack = Stack(running, dashboard, f"https://localhost:{dashboard.port}", dashboard.first_admin_password or "")
    assert stack.admin_password, "the dashboard did not generate the first admin password"
    assert len(stack.alerts()) >= 2
    thread = threading.Thread(target=_background_traffic, args=(stack,), daemon=True)
    thread.start()
    try:
        yield stack
    finally:
        stack.traffic_stop.set()
        thread.join(timeout=30)
        dashboard.stop()
        running.app.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Any, stack: Stack, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A fresh browser context (its own cookies) at 1366x768; the screenshot of the last page is saved."""
    context = browser.new_context(viewport={"width": 1366, "height": 768}, ignore_https_errors=True,
                                  accept_downloads=True, color_scheme="dark")
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=stack.url)
    page = context.new_page()
    page.set_default_timeout(15_000)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.csp_errors = errors  # type: ignore[attr-defined]
    try:
        yield page
    finally:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shot = ARTIFACTS / f"{request.node.name}.png"
        try:
            page.screenshot(path=str(shot), full_page=True)
            print(f"screenshot: {shot}")
        finally:
            context.close()


def sign_in(page: Any, stack: Stack, username: str = "admin", password: str | None = None) -> None:
    page.goto(stack.url + "/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password if password is not None else stack.admin_password)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("navigation", name="Main").wait_for()


def axe_violations(page: Any) -> list[str]:
    """Serious and critical axe-core violations on the current page (axe from npm, evaluated in the page)."""
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        page.evaluate(AXE.read_text() + "\n;undefined")
    result = page.evaluate("async () => (await axe.run(document, {resultTypes: ['violations']})).violations"
                           ".map(v => ({id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map(n => n.target.join(' ')).slice(0, 3)}))")
    return [f"{v['id']} ({v['impact']}): {v['help']} at {v['nodes']}" for v in result
            if v["impact"] in ("serious", "critical")]
