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


def start(tmp_path, config_text, cwd=ROOT):
    config = tmp_path / "config.yaml"
    config.write_text(config_text)
    (tmp_path / "sig").mkdir(exist_ok=True)  # a configured signatures directory must exist
    env = {k: v for k, v in os.environ.items() if k != "SENSOR_ADMIN_TOKEN"}
    return subprocess.Popen([sys.executable, "-m", "appliance", "--config", str(config)], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def banner(proc) -> dict[str, str]:
    """The start-up banner's `name : value` lines, read until the authenticate line."""
    lines: dict[str, str] = {}
    for line in iter(proc.stdout.readline, ""):
        name, sep, value = line.partition(" : ")
        if sep:
            lines[name.strip()] = value.strip()
        if name.strip() == "authenticate":
            return lines
    raise AssertionError(f"no banner; output ended: {proc.stdout.read()}")


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
    (tmp_path / "sig").mkdir()
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
def test_started_from_another_directory_loads_the_shipped_rules_and_prints_a_checkable_fingerprint(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = start(tmp_path, f"""
grpc: {{listen: "127.0.0.1:0"}}
rest: {{listen: "127.0.0.1:0"}}
paths: {{state_dir: "{tmp_path}/state", certs_dir: "{tmp_path}/certs", static_dir: "{tmp_path}/static"}}
""", cwd=elsewhere)
    try:
        shown = banner(proc)
        port = int(re.search(r"https://localhost:(\d+)/", shown["REST API"]).group(1))
        ctx = ssl.create_default_context(cafile=f"{tmp_path}/certs/ca.pem")
        token = (tmp_path / "state" / "admin.token").read_text().strip()
        req = urllib.request.Request(f"https://localhost:{port}/api/v1/metrics",
                                     headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(req, context=ctx, timeout=10) as reply:
            metrics = json.load(reply)
        assert metrics["signature_rules"] == len(list((ROOT / "rules").glob("*.yaml"))) > 0
        assert list(elsewhere.iterdir()) == []  # no empty rules/ (or anything else) in the working directory
        # The banner's fingerprint is what the openssl command it prints shows.
        command = shown["check it with"].split()
        assert command[0] == "openssl"
        shown_by_openssl = subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()
        assert shown["CA fingerprint"].startswith(shown_by_openssl + " ")
        assert "DER" in shown["CA fingerprint"]
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0


def test_a_configured_signatures_directory_that_does_not_exist_stops_startup(tmp_path):
    proc = start(tmp_path, f"paths: {{signatures_dir: '{tmp_path}/no-such-rules'}}\n")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert f"paths.signatures_dir: no such directory (got '{tmp_path}/no-such-rules')" in out
    assert not (tmp_path / "no-such-rules").exists()


@pytest.mark.slow
def test_pings_the_systemd_watchdog_while_running(tmp_path):
    import socket
    sock_path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(sock_path)
    sock.settimeout(60)
    (tmp_path / "sig").mkdir()  # a configured signatures directory must exist
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
