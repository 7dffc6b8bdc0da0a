"""The entry point as an administrator runs it: start, serve, SIGTERM, clean exit."""

import json
import os
import re
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def start(tmp_path, config_text):
    config = tmp_path / "config.yaml"
    config.write_text(config_text)
    env = {k: v for k, v in os.environ.items() if k != "SENSOR_ADMIN_TOKEN"}
    return subprocess.Popen([sys.executable, "-m", "appliance", "--config", str(config)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.slow
def test_runs_serves_and_exits_cleanly_on_sigterm(tmp_path):
    proc = start(tmp_path, f"""
grpc: {{listen: "127.0.0.1:0"}}
rest: {{listen: "127.0.0.1:0"}}
paths: {{state_dir: "{tmp_path}/state", certs_dir: "{tmp_path}/certs", static_dir: "{tmp_path}/static", signatures_dir: "{tmp_path}/sig"}}
""")
    lines = []
    port = None
    deadline = time.monotonic() + 60
    while port is None and time.monotonic() < deadline:
        line = proc.stdout.readline()
        lines.append(line)
        match = re.search(r"https://localhost:(\d+)/api/status", line)
        if match:
            port = int(match.group(1))
    assert port, "".join(lines)
    token_line = next(l for l in iter(proc.stdout.readline, "") if "admin token" in l)
    token = (tmp_path / "state" / "admin.token").read_text().strip()
    assert token not in token_line  # stdout is not a terminal here: the secret stays out of logs
    ctx = ssl.create_default_context(cafile=f"{tmp_path}/certs/ca.pem")
    with urllib.request.urlopen(f"https://localhost:{port}/api/status", context=ctx, timeout=10) as reply:
        assert json.load(reply)["status"] == "Running"
    req = urllib.request.Request(f"https://localhost:{port}/api/v1/metrics", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, context=ctx, timeout=10) as reply:
        assert reply.status == 200
    proc.send_signal(signal.SIGTERM)
    proc.send_signal(signal.SIGTERM)  # a second signal while the first is handled must not deadlock
    assert proc.wait(30) == 0
    assert (tmp_path / "state" / "admin.token").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "certs" / "ca.key").stat().st_mode & 0o777 == 0o600


def test_bad_config_stops_startup_naming_the_key(tmp_path):
    proc = start(tmp_path, "limits:\n  max_flows: many\n")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "limits.max_flows" in out and "'many'" in out


@pytest.mark.slow
def test_reports_ready_and_stopping_to_systemd(tmp_path):
    import socket
    sock_path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(sock_path)
    sock.settimeout(60)
    config = tmp_path / "config.yaml"
    config.write_text(f"""
grpc: {{listen: "127.0.0.1:0"}}
rest: {{listen: "127.0.0.1:0"}}
paths: {{state_dir: "{tmp_path}/state", certs_dir: "{tmp_path}/certs", static_dir: "{tmp_path}/static", signatures_dir: "{tmp_path}/sig"}}
""")
    env = dict(os.environ, NOTIFY_SOCKET=sock_path)
    proc = subprocess.Popen([sys.executable, "-m", "appliance", "--config", str(config)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert b"READY=1" in sock.recv(4096)
        proc.send_signal(signal.SIGTERM)
        assert b"STOPPING=1" in sock.recv(4096)
        assert proc.wait(30) == 0
    finally:
        proc.kill()
        sock.close()


@pytest.mark.slow
def test_pings_the_systemd_watchdog_while_running(tmp_path):
    import socket
    sock_path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(sock_path)
    sock.settimeout(60)
    config = tmp_path / "config.yaml"
    config.write_text(f"""
grpc: {{listen: "127.0.0.1:0"}}
rest: {{listen: "127.0.0.1:0"}}
paths: {{state_dir: "{tmp_path}/state", certs_dir: "{tmp_path}/certs", static_dir: "{tmp_path}/static", signatures_dir: "{tmp_path}/sig"}}
""")
    # WatchdogSec=1: systemd would restart a process silent for 1 s, so pings must keep coming.
    env = dict(os.environ, NOTIFY_SOCKET=sock_path, WATCHDOG_USEC="1000000")
    proc = subprocess.Popen([sys.executable, "-m", "appliance", "--config", str(config)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert b"READY=1" in sock.recv(4096)
        sock.settimeout(5)
        pings = [sock.recv(4096) for _ in range(3)]
        assert all(b"WATCHDOG=1" in ping for ping in pings)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        proc.kill()
        sock.close()
