"""`python -m appliance.dashboard` as a real process: banner with the URL, first password only in its file, clean stop."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import yaml

from appliance.dashboard.accounts import FIRST_ADMIN_FILE
from tests.appliance.dashboard.conftest import Browser


def _config(tmp, appliance, dist) -> str:
    path = tmp / "dashboard.yaml"
    path.write_text(yaml.safe_dump({
        "paths": {"state_dir": str(tmp / "state"), "certs_dir": str(tmp / "certs"), "static_dir": str(tmp / "static")},
        "dashboard": {"listen": "127.0.0.1:0", "api_url": f"https://localhost:{appliance.app.rest_port}",
                      "dist_dir": str(dist)},
    }))
    return str(path)


def test_the_process_prints_its_url_keeps_the_password_off_a_non_terminal_and_stops_on_sigterm(appliance, tmp_path):
    import ssl

    config = _config(tmp_path, appliance, tmp_path / "no-dist")
    env = {k: v for k, v in os.environ.items() if k != "SENSOR_ADMIN_TOKEN"}
    proc = subprocess.Popen([sys.executable, "-m", "appliance.dashboard", "--config", config], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    try:
        lines = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if "web app" in line:
                break
        out = "".join(lines)
        port = int(re.search(r"console URL\s+: https://127\.0\.0\.1:(\d+)/", out).group(1))
        password = (tmp_path / "state" / FIRST_ADMIN_FILE).read_text().strip()
        assert password not in out and "generated into" in out and "is not built" in out
        browser = Browser(port, ssl.create_default_context(cafile=str(appliance.app.ca.ca_cert_path)))
        assert browser.login("admin", password)[0] == 200
        assert browser.get("/api/v1/metrics")[0] == 200
        status, body = browser.get("/")
        assert status == 503 and body["code"] == "not_built"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_without_the_appliances_certificates_it_refuses_to_start(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"paths": {"state_dir": str(tmp_path / "s"), "certs_dir": str(tmp_path / "none")},
                                    "dashboard": {"listen": "127.0.0.1:0"}}))
    done = subprocess.run([sys.executable, "-m", "appliance.dashboard", "--config", str(path)], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 2 and "start the appliance once first" in done.stderr
