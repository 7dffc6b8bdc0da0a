"""The first hour as a new admin lives it: a clean clone, `make run`, then the README's enrollment of a Linux
machine (a network namespace) with the pasted command and no other step; the agent streams.

The appliance listens only on the lab's root-side address, on free ports (`make run CONFIG=...`), so runs in
parallel never clash. The "machine" shares this host's file system, so the pasted command runs with
SENSOR_INSTALL_ROOT (its directory) and the agent is started as the unit it wrote would start it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agents.netns import Lab, lab_available
from tests.polling import wait_for

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def readme_token_command() -> str:
    """The README's token command (step 2 of "Enrolling an agent"), as written."""
    section = (ROOT / "README.md").read_text().split("## Enrolling an agent", 1)[1]
    [line] = [l.strip() for l in section.splitlines() if "-X POST https://10.0.0.5:8080/api/v1/agent/tokens" in l]
    return line


@pytest.fixture
def lab() -> Iterator[Lab]:
    reason = lab_available()
    if reason:
        pytest.skip(reason)
    lab = Lab.create()
    try:
        yield lab
    finally:
        lab.close()


@pytest.mark.slow
def test_clean_clone_make_run_then_the_readme_enrolls_a_linux_machine_with_one_pasted_command(lab: Lab,
                                                                                                tmp_path: Path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    address, _ = lab.uplink
    rest_port, grpc_port = free_port(), free_port()
    config = tmp_path / "config.yaml"
    config.write_text(f'grpc: {{listen: "{address}:{grpc_port}"}}\nrest: {{listen: "{address}:{rest_port}"}}\n')
    env = {k: v for k, v in os.environ.items() if k not in ("SENSOR_ADMIN_TOKEN", "MAKEFLAGS", "MAKELEVEL")}
    log = tmp_path / "make-run.log"
    with log.open("w") as out:
        make = subprocess.Popen(["make", "run", f"CONFIG={config}"], cwd=clone, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        banner = wait_for(lambda: "authenticate" in log.read_text() or make.poll() is not None, timeout=1200,
                          interval=1.0)
        output = log.read_text()
        assert banner and make.poll() is None, output[-4000:]
        assert "building the Linux agent with PyInstaller" in output and "built the Linux agent in" in output
        served = clone / "var" / "static" / "agents" / "linux-amd64" / "sensor-agent"
        assert served.stat().st_mode & 0o111

        # README step 2, as written, in the checkout (only the address and port are this lab's).
        command = readme_token_command().replace("10.0.0.5:8080", f"{address}:{rest_port}")
        done = subprocess.run(["sh", "-c", command], cwd=clone, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        reply = json.loads(done.stdout)
        assert reply["base_url"] == f"https://{address}:{rest_port}" and reply["warning"] is None

        # README step 3: the machine pastes command_unix (as root: plain sh, no sudo).
        machine = tmp_path / "machine"
        (machine / "etc").mkdir(parents=True)
        (machine / "etc" / "machine-id").write_text("5e4b1c0ffee0000000000000000000aa\n")
        pasted = lab.ns(lab.agent_ns, "env", f"SENSOR_INSTALL_ROOT={machine}", "sh", "-c", reply["command_unix"],
                        check=False)
        assert pasted.returncode == 0, pasted.stdout + pasted.stderr
        assert "verified /static/agents/linux-amd64/sensor-agent" in pasted.stdout

        # What the written unit starts, started the same way, on that machine.
        unit = (machine / "etc" / "systemd" / "system" / "sensor-agent.service").read_text()
        exec_start = re.search(r"^ExecStart=(.+)$", unit, re.M).group(1).split()
        assert exec_start[0] == str(machine / "usr" / "local" / "bin" / "sensor-agent")
        lab.spawn(lab.agent_ns, *exec_start, log=tmp_path / "agent.log")

        # README step 4: the agent appears, online, with the traffic of that machine.
        _, peer = lab.link
        context = ssl.create_default_context(cafile=str(clone / "var" / "certs" / "ca.pem"))
        token = (clone / "var" / "admin.token").read_text().strip()

        def online_with_packets() -> list:
            lab.ns(lab.agent_ns, "python3", "-c", "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
                   f"[s.sendto(b'hello', ('{peer}', 9)) for _ in range(5)]")
            request = urllib.request.Request(f"https://{address}:{rest_port}/api/v1/agents",
                                             headers={"Authorization": f"Bearer {token}"})
            with urllib.request.urlopen(request, context=context, timeout=10) as answer:
                agents = json.load(answer)["agents"]
            return [a for a in agents if a["status"] == "online" and a["packets_received"] > 0]

        agents = wait_for(online_with_packets, timeout=60, interval=1.0)
        assert len(agents) == 1, (tmp_path / "agent.log").read_text()[-3000:]
    finally:
        try:
            os.killpg(make.pid, signal.SIGTERM)
            make.wait(60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(make.pid, signal.SIGKILL)
            make.wait(10)
