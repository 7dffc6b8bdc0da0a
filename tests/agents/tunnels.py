"""Real tunneling tools in the namespace lab: iodine (IP over DNS) and ptunnel-ng (TCP over ICMP)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from tests.agents.netns import ROOT, Lab

TRAFFIC = ROOT / "tests" / "agents" / "lab_traffic.py"


def start_tunnel_servers(lab: Lab, tunnel_dns: str, peer: str, logs: Path) -> None:
    """iodined on `tunnel_dns` and a ptunnel-ng proxy to `peer`:8080, both in the peer namespace."""
    lab.spawn(lab.peer_ns, "iodined", "-f", "-c", "-l", tunnel_dns, "-P", "labsecret", f"10.98.{lab.index}.1/27",
              "t.tunnel.lab", log=logs / "iodined.log")
    lab.spawn(lab.peer_ns, "ptunnel-ng", "-r" + peer, "-R8080", "-v1", log=logs / "ptunnel-server.log")


def tunnel_round(lab: Lab, tunnel_dns: str, peer: str, logs: Path, seconds: float = 15.0) -> None:
    """Both clients in the agent namespace, moving data through their tunnels for `seconds`, then stopped."""
    iodine = lab.spawn(lab.agent_ns, "iodine", "-f", "-r", "-P", "labsecret", tunnel_dns, "t.tunnel.lab",
                       log=logs / "iodine.log")
    ptunnel = lab.spawn(lab.agent_ns, "ptunnel-ng", "-p" + peer, "-l8000", "-r" + peer, "-R8080", "-v1",
                        log=logs / "ptunnel-client.log")
    lab.wait_port(lab.agent_ns, 8000)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:  # data through both tunnels for a while
        lab.ns(lab.agent_ns, "curl", "-s", "-o", "/dev/null", "--max-time", "2", "http://127.0.0.1:8000/", check=False)
        lab.ns(lab.agent_ns, sys.executable, str(TRAFFIC), "icmp", f"10.98.{lab.index}.1", "2", check=False)
    lab.stop(iodine)
    lab.stop(ptunnel)
