"""The console in headless Chromium against a real appliance fed with real gRPC traffic, through the real
dashboard: sign-in, live metrics, the inbox and triage, exclusions, export, enrollment, rules, roles, and
axe-core on every page. Each test saves a screenshot under var/artifacts/console/."""

from __future__ import annotations

import csv
import io
import os
import re
import signal

import pytest

from tests.appliance.detection import scenarios as sc
from tests.appliance.detection.conftest import start_detecting
from appliance.config import parse_settings
from appliance.dashboard.app import build
from tests.conftest import appliance_settings
from tests.polling import wait_for
from tests.console.conftest import ANALYST_PASSWORD, ARTIFACTS, DIST, Stack, axe_violations, sign_in
from tests.console.relay import Relay

pytestmark = pytest.mark.slow

PAGES = ["/", "/alerts", "/flows", "/agents", "/processes", "/rules", "/exclusions", "/config", "/enrollment", "/users"]


def _points(page) -> int:
    return int(page.locator("[data-points]").first.get_attribute("data-points"))


def test_sign_in_and_the_live_metrics_chart_moves(page, stack: Stack) -> None:
    page.goto(stack.url + "/")
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill("not-the-password")
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("alert").filter(has_text="Wrong username or password").wait_for()
    sign_in(page, stack)
    page.get_by_role("heading", name="Overview").wait_for()
    page.wait_for_function("() => Number(document.querySelector('[data-points]').dataset.points) >= 2")
    first_points, first_total = _points(page), page.get_by_test_id("total-packets").inner_text()
    page.wait_for_function(f"() => Number(document.querySelector('[data-points]').dataset.points) >= {first_points + 3}")
    page.wait_for_function(f"() => document.querySelector('[data-testid=total-packets]').textContent !== {first_total!r}")
    assert page.locator(".uplot").count() >= 3
    assert axe_violations(page) == []


def test_alert_appears_is_triaged_with_notes_excluded_and_exported(page, stack: Stack) -> None:
    sign_in(page, stack)
    page.get_by_role("link", name="Alerts").click()
    rows = page.get_by_role("table", name="Alert groups").locator("tbody tr[data-row]")
    rows.first.wait_for()
    before = rows.count()
    # A new attack while the inbox is open: auto-refresh shows it.
    sc.stream(stack.appliance.stub(), sc.dnscat2_tunnel())
    assert stack.appliance.app.pipeline.drain()
    page.wait_for_function(f"() => document.querySelectorAll('tr[data-row]').length > {before}", timeout=20_000)
    assert axe_violations(page) == []

    alert = next(a for a in stack.alerts() if a["category"] == "RawIpTls")
    page.locator("tr[data-row]", has_text=alert["indicator"]).get_by_role("link", name="Open").click()
    page.get_by_test_id("alert-status").filter(has_text="New").wait_for()
    page.get_by_label("Note (optional, kept in the history)").fill("looked at the SNI")
    page.get_by_role("button", name="Acknowledge").click()
    page.get_by_test_id("alert-status").filter(has_text="Acknowledged").wait_for()
    page.get_by_label("Note (optional, kept in the history)").fill("raw IP TLS to an unknown host: escalating")
    page.get_by_role("button", name="Escalate").click()
    page.get_by_test_id("alert-status").filter(has_text="Investigating").wait_for()
    history = page.get_by_role("table").filter(has_text="Who")
    history.get_by_text("raw IP TLS to an unknown host: escalating").wait_for()
    assert history.get_by_role("cell", name="admin", exact=True).count() == 2
    detail = stack.appliance.rest.get(f"/api/v1/alerts/{alert['id']}")[1]
    assert [(h["actor"], h["to"], h["note"]) for h in detail["history"]] == [
        ("admin", "Acknowledged", "looked at the SNI"), ("admin", "Investigating", "raw IP TLS to an unknown host: escalating")]

    page.get_by_role("button", name="Add exclusion from this alert").click()
    value = page.get_by_label("Value (IP, CIDR or domain)").input_value()
    assert value == detail["detections"][0]["evidence"]["remote_ip"]
    assert page.get_by_label("Protocol scope").input_value() == "tls"
    page.get_by_role("button", name="Save exclusion").click()
    page.get_by_role("status").filter(has_text="Exclusion added").wait_for()
    page.screenshot(path=str(ARTIFACTS / "alert-detail.png"), full_page=True)
    entries = stack.appliance.rest.get("/api/v1/whitelist")[1]["entries"]
    assert [(e["value"], e["protocol"]) for e in entries] == [(value, "tls")]
    assert axe_violations(page) == []

    page.get_by_role("link", name="Back to the inbox").click()
    page.get_by_role("tab", name="All").click()
    page.locator("tr[data-row]").first.wait_for()
    with page.expect_download() as download:
        page.get_by_role("link", name="Export CSV").click()
    rows_csv = list(csv.DictReader(io.StringIO(download.value.path().read_text())))
    assert {r["id"] for r in rows_csv} == {a["id"] for a in stack.alerts()}


def test_bulk_acknowledge_a_group_with_the_keyboard_and_everything_matching(page, stack: Stack) -> None:
    sign_in(page, stack)
    page.goto(stack.url + "/#/alerts")
    dns = [a for a in stack.alerts(status="New") if a["category"] in ("DnsTunneling",)]
    assert dns, "the dns tunnel scenarios raised no alert"
    group = page.locator("tr[data-row]", has_text=dns[0]["indicator"])
    group.wait_for()
    group.get_by_role("button", name=re.compile("List the alerts of")).click()
    listed = page.locator("tr.expanded")
    listed.get_by_text(dns[0]["summary"]).wait_for()
    new_in_group = [a for a in dns if a["indicator"] == dns[0]["indicator"] and a["agent_id"] == dns[0]["agent_id"]]
    assert f"{len(new_in_group)} of {len(new_in_group)} alerts" in listed.inner_text()
    group.get_by_role("button", name=re.compile("List the alerts of")).click()
    listed.wait_for(state="detached")
    page.locator("body").click(position={"x": 5, "y": 700})
    row_index = int(group.get_attribute("data-row"))
    # Typed without waiting for the page to render in between, as a practised analyst types: "x" selects the
    # row the cursor has reached, not the one the last render drew.
    for _ in range(row_index):
        page.keyboard.press("j")
    page.keyboard.press("x")
    page.wait_for_selector(f"tr[data-row='{row_index}'].cursor[aria-selected='true']")
    assert group.get_attribute("aria-selected") == "true"
    assert page.locator("tr[data-row][aria-selected='true']").count() == 1
    page.keyboard.press("e")
    page.get_by_role("status").filter(has_text=re.compile(r"Acknowledged: \d+ of \d+ alerts changed")).wait_for()
    same = [a for a in stack.alerts(indicator=dns[0]["indicator"]) if a["agent_id"] == dns[0]["agent_id"]]
    assert same and all(a["status"] == "Acknowledged" for a in same)
    page.keyboard.press("?")
    page.get_by_role("dialog", name="Keyboard shortcuts").wait_for()
    assert axe_violations(page) == []
    page.keyboard.press("Escape")

    remaining = len(stack.alerts(status="New"))
    assert remaining > 0
    page.get_by_role("button", name=re.compile(r"Acknowledge all \d+ matching")).click()
    page.get_by_role("status").filter(has_text=f"Acknowledged: {remaining} of {remaining} alerts changed").wait_for()
    assert stack.alerts(status="New") == []
    page.get_by_text("No alerts match.").wait_for()


def test_enrollment_token_command_is_copied(page, stack: Stack) -> None:
    sign_in(page, stack)
    page.get_by_role("link", name="Enrollment").click()
    page.get_by_role("button", name="Create an enrollment token").click()
    unix = page.get_by_test_id("cmd-unix")
    unix.wait_for()
    command = unix.inner_text()
    assert re.search(r"token=[0-9a-f-]{8,}", command) and command.startswith("curl")
    page.get_by_role("button", name="Copy the Linux and macOS command").click()
    page.get_by_role("status").filter(has_text="Copied").first.wait_for()
    assert page.evaluate("() => navigator.clipboard.readText()") == command
    assert page.get_by_test_id("cmd-windows").inner_text().strip() != ""
    assert axe_violations(page) == []


def test_rule_toggle_and_an_invalid_rule_refused_at_its_line(page, stack: Stack) -> None:
    sign_in(page, stack)
    page.get_by_role("link", name="Rules").click()
    toggle = page.get_by_label("Enable rule SIG-DNS-001")
    assert toggle.is_checked()
    toggle.click()
    page.get_by_role("status").filter(has_text="Rule SIG-DNS-001 disabled.").wait_for()
    # The engine's inotify watcher may reload once more from the directory it read mid-write (its reloads are
    # not serialised with toggle's), so the persisted state is awaited, then shown after a fresh load.
    assert wait_for(lambda: next(r for r in stack.appliance.rest.get("/api/v1/signatures")[1]["rules"]
                                 if r["id"] == "SIG-DNS-001")["enabled"] is False, timeout=10)
    page.reload()
    page.get_by_label("Enable rule SIG-DNS-001").wait_for()
    assert not page.get_by_label("Enable rule SIG-DNS-001").is_checked()

    editor = page.get_by_label("Rule YAML")
    text = editor.input_value().replace("op: gt", "op: bigger")
    editor.fill(text)
    page.get_by_role("button", name="Validate").click()
    line = text.split("\n").index("    op: bigger") + 1
    problem = page.locator("#rule-problems li").first
    problem.wait_for()
    assert problem.inner_text().startswith(f"Line {line}: conditions[0].op: unknown operator 'bigger'")
    assert page.locator(".gutter .bad-line").inner_text().strip() == str(line)
    editor.fill(text.replace("op: bigger", "op: gt"))
    page.get_by_role("button", name="Validate").click()
    page.get_by_role("status").filter(has_text="Valid").wait_for()
    assert axe_violations(page) == []


def test_analyst_is_refused_admin_pages(page, stack: Stack) -> None:
    if stack.dashboard.users.get("ana") is None:
        stack.dashboard.users.create("ana", ANALYST_PASSWORD, "analyst")
    sign_in(page, stack, "ana", ANALYST_PASSWORD)
    assert page.get_by_role("link", name="Enrollment").count() == 0
    page.get_by_role("link", name="Users").click()
    page.get_by_role("alert").filter(has_text="your role (analyst) cannot").wait_for()
    page.goto(stack.url + "/#/enrollment")
    page.get_by_role("button", name="Create an enrollment token").click()
    page.get_by_role("alert").filter(has_text="your role (analyst) cannot").wait_for()
    assert axe_violations(page) == []


def test_every_page_has_no_serious_accessibility_violation_and_fits_1366(page, stack: Stack) -> None:
    sign_in(page, stack)
    found: dict[str, list[str]] = {}
    for path in PAGES:
        page.goto(f"{stack.url}/#{path}")
        page.locator("#page-title").wait_for()
        page.wait_for_timeout(600)
        found[path] = axe_violations(page)
        assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth"), f"{path} scrolls sideways"
        page.screenshot(path=str(ARTIFACTS / f"page{path.replace('/', '-') if path != '/' else '-overview'}.png"),
                        full_page=True)
    assert {p: v for p, v in found.items() if v} == {}
    assert not [e for e in page.csp_errors if "Content Security Policy" in e]


def test_processes_keep_terminated_ones_visible_until_hidden(page, stack: Stack) -> None:
    from appliance.generated import sensor_pb2

    ProcessEvent = sensor_pb2.ProcessEvent
    events = [ProcessEvent(kind=ProcessEvent.START, timestamp=sc.T0_MS + 1000, pid=4242, ppid=1, name="exfil.sh",
                           path="/tmp/exfil.sh", command_line="sh /tmp/exfil.sh --to 203.0.113.9", user="bob"),
              ProcessEvent(kind=ProcessEvent.EXIT, timestamp=sc.T0_MS + 9000, pid=4242, exit_code=0, name="exfil.sh"),
              ProcessEvent(kind=ProcessEvent.START, timestamp=sc.T0_MS + 2000, pid=77, ppid=1, name="sshd",
                           command_line="/usr/sbin/sshd -D", user="root")]
    stack.appliance.stub().StreamProcesses(iter(events), metadata=[("x-machine-id", "console-proc-host"),
                                                                   ("x-agent-hostname", "proc-host")])
    agent = next(a for a in stack.appliance.rest.get("/api/v1/agents")[1]["agents"] if a["hostname"] == "proc-host")
    sign_in(page, stack)
    page.goto(f"{stack.url}/#/processes?agent_id={agent['id']}")
    table = page.get_by_role("table", name="Processes")
    table.get_by_text("sh /tmp/exfil.sh --to 203.0.113.9").wait_for()
    assert table.locator("tr.terminated").count() == 1
    assert "exit 0" in table.locator("tr.terminated").inner_text()
    page.get_by_label("Hide terminated processes").check()
    table.get_by_text("sh /tmp/exfil.sh").wait_for(state="detached")
    assert table.get_by_text("/usr/sbin/sshd -D").is_visible()
    page.get_by_label("Hide terminated processes").uncheck()
    table.get_by_text("sh /tmp/exfil.sh --to 203.0.113.9").wait_for()
    assert axe_violations(page) == []




def test_forms_show_the_api_messages_at_their_fields_and_the_capture_its_state(page, stack: Stack) -> None:
    sign_in(page, stack)
    page.goto(stack.url + "/#/config")
    page.get_by_label("Retention (days)").fill("0")
    page.get_by_role("button", name="Save storage").click()
    page.locator("#err-storage\\.retentionDays").wait_for()
    assert page.get_by_label("Retention (days)").get_attribute("aria-invalid") == "true"
    page.get_by_label("Retention (days)").fill("14")
    page.get_by_role("button", name="Save storage").click()
    page.get_by_role("status").filter(has_text="Saved storage.").wait_for()
    assert stack.appliance.rest.get("/api/v1/settings")[1]["storage"]["retentionDays"] == 14
    # The port capture: idle, its interfaces listed from the appliance (netlink), counters per protocol.
    page.get_by_test_id("capture-status").filter(has_text="idle").wait_for()
    page.locator("#capture-if option[value='lo']").wait_for(state="attached")
    assert page.get_by_role("table", name="Packets per protocol").is_visible()
    assert axe_violations(page) == []

    page.goto(stack.url + "/#/exclusions")
    page.get_by_label("Value (IP, CIDR or domain; a domain covers its subdomains)").fill("not a domain!")
    page.get_by_role("button", name="Add exclusion").click()
    page.locator("#ex-value-err").wait_for()
    assert page.locator("#ex-value-err").inner_text().startswith("value:")

    page.goto(stack.url + "/#/users")
    page.get_by_label("Username").fill("bert")
    page.get_by_label("Password (12 characters or more)", exact=True).fill("short")
    page.get_by_role("button", name="Create").click()
    page.locator(".field-error").first.wait_for()
    page.get_by_label("Password (12 characters or more)", exact=True).fill("bert-password-12")
    page.get_by_role("button", name="Create").click()
    page.get_by_role("status").filter(has_text="Created bert (analyst).").wait_for()
    page.get_by_role("button", name="Disable bert").click()
    page.get_by_role("button", name="Enable bert").wait_for()
    assert stack.dashboard.users.get("bert").disabled


def test_polling_resumes_by_itself_when_the_appliance_api_comes_back(page, stack: Stack, tmp_path) -> None:
    """The appliance's API goes away (as in a restart) and comes back at the same address: the overview says
    what is wrong, and the live chart picks up again without a reload. A second dashboard reaches the
    appliance through a relay the test cuts and restores."""
    relay = Relay(stack.appliance.app.rest_port)
    relay.start()
    data = appliance_settings(stack.appliance.tmp).model_dump(mode="json")
    data["dashboard"].update({"listen": "127.0.0.1:0", "api_url": f"https://localhost:{relay.port}",
                              "dist_dir": str(DIST), "threads": 4})
    dashboard = build(parse_settings(data, "test"))
    dashboard.start()
    try:
        url = f"https://localhost:{dashboard.port}"
        sign_in(page, Stack(stack.appliance, dashboard, url, stack.admin_password))
        page.wait_for_function("() => Number(document.querySelector('[data-points]').dataset.points) >= 2")
        relay.stop()
        page.get_by_role("alert").filter(has_text="Live metrics").wait_for(timeout=20_000)
        stalled = _points(page)
        page.wait_for_timeout(1500)
        assert _points(page) == stalled
        relay.start()
        page.get_by_role("alert").filter(has_text="Live metrics").wait_for(state="detached", timeout=20_000)
        page.wait_for_function(f"() => Number(document.querySelector('[data-points]').dataset.points) > {stalled}")
    finally:
        dashboard.stop()
        relay.stop()


def test_the_overview_says_where_analysis_runs_and_counts_a_crash_of_the_analysis_process(page, stack: Stack,
                                                                                        tmp_path, monkeypatch) -> None:
    """The overview's analysis panel: the shared stack analyses on a thread of the server (its tests reach into the
    layers); an appliance of its own runs the analysis process, as `make run` does. That process killed with
    SIGKILL is restarted by the server, and the panel says the crash happened (it counts since start: flows may
    have gone unanalysed) until the appliance restarts, while the new process runs."""
    sign_in(page, stack)
    page.get_by_test_id("analysis-state").filter(has_text="Running").wait_for()
    assert "on a thread of the server" in page.get_by_test_id("analysis").inner_text()
    # the rate from two ticks of the live metrics (the background agent streams all along)
    page.get_by_test_id("analysis-details").filter(has_text=re.compile(r"analysing [\d,]+ flows? a second")).wait_for()
    assert page.locator(".analysis-ok").count() == 1

    monkeypatch.delenv("SENSOR_ADMIN_TOKEN", raising=False)
    running = start_detecting(tmp_path, analysis={"worker": "process"})
    dashboard = None
    try:
        data = appliance_settings(tmp_path, analysis={"worker": "process"}).model_dump(mode="json")
        data["dashboard"].update({"listen": "127.0.0.1:0", "api_url": f"https://localhost:{running.app.rest_port}",
                                  "dist_dir": str(DIST), "threads": 4})
        dashboard = build(parse_settings(data, "test"))
        dashboard.start()
        own = Stack(running, dashboard, f"https://localhost:{dashboard.port}", dashboard.first_admin_password or "")
        page.context.clear_cookies()
        sign_in(page, own)
        panel = page.get_by_test_id("analysis")
        page.get_by_test_id("analysis-state").filter(has_text="Running").wait_for(timeout=30_000)
        assert "in the analysis process" in panel.inner_text()
        pid = wait_for(lambda: (w := running.rest.get("/api/v1/metrics")[1]["analysis_worker"])["running"] and w["pid"])
        os.kill(pid, signal.SIGKILL)
        page.locator(".analysis-warn").wait_for(timeout=30_000)
        page.get_by_test_id("analysis-details").filter(has_text="restarted 1 time since start").wait_for(timeout=30_000)
        page.get_by_test_id("analysis-state").filter(has_text="Running").wait_for(timeout=60_000)
        restarted = running.rest.get("/api/v1/metrics")[1]["analysis_worker"]
        assert restarted["restarts"] == 1 and restarted["pid"] not in (0, pid)
        assert axe_violations(page) == []
        page.screenshot(path=str(ARTIFACTS / "overview-analysis-restarted.png"), full_page=True)
    finally:
        if dashboard is not None:
            dashboard.stop()
        running.app.stop()
