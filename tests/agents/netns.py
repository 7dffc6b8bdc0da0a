"""Network-namespace lab: namespaces, veth pairs, processes inside them, and guaranteed cleanup.

Topology (X is chosen per run so concurrent runs do not collide; every address is lab-private):

    root ns                 agent ns                         peer ns
    lab-r<k> 10.99.X.1 <--> eth0 10.99.X.2
     (appliance gRPC)       eth1 10.99.X+1.1 <-------------> eth0 10.99.X+1.2
                            (agent captures here)            (dnsmasq, HTTP, TLS, iodined...)

The agent reaches the appliance through the root-side veth address; all traffic it captures goes
to the peer namespace. Nothing is routed to the real network.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, check=check, capture_output=True, text=True, timeout=30)


def lab_available() -> str | None:
    """Why the lab cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return "the network-namespace lab needs root (it creates namespaces and veth pairs)"
    if shutil.which("ip") is None:
        return "the lab needs iproute2 (`ip`)"
    return None


@dataclass
class Lab:
    """One lab instance; `close()` removes everything it made, whatever state it is in."""

    index: int
    agent_ns: str = ""
    peer_ns: str = ""
    root_if: str = ""
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.agent_ns = f"lab{self.index}-agent"
        self.peer_ns = f"lab{self.index}-peer"
        self.root_if = f"lab{self.index}r"

    @property
    def uplink(self) -> tuple[str, str]:
        """(root side, agent side) addresses of the link to the appliance."""
        x = self.index * 2
        return f"10.99.{x}.1", f"10.99.{x}.2"

    @property
    def link(self) -> tuple[str, str]:
        """(agent side, peer side) addresses of the captured link."""
        x = self.index * 2 + 1
        return f"10.99.{x}.1", f"10.99.{x}.2"

    @classmethod
    def create(cls) -> Lab:
        """A lab on the first free index from this process's: another run's lab is never touched."""
        for offset in range(100):
            lab = cls(10 + (os.getpid() + offset) % 100)
            # Claiming the agent namespace name is the lock: `ip netns add` fails when it exists.
            if run("ip", "netns", "add", lab.agent_ns, check=False).returncode != 0:
                continue
            try:
                lab._build()
            except BaseException:
                lab.close()
                raise
            return lab
        raise RuntimeError("no free lab index (leftover lab*-agent namespaces? see `ip netns list`)")

    def _build(self) -> None:
        root_addr, agent_up = self.uplink
        agent_addr, peer_addr = self.link
        run("ip", "netns", "add", self.peer_ns)
        run("ip", "link", "add", self.root_if, "type", "veth", "peer", "name", "eth0", "netns", self.agent_ns)
        run("ip", "addr", "add", f"{root_addr}/24", "dev", self.root_if)
        run("ip", "link", "set", self.root_if, "up")
        self.ns(self.agent_ns, "ip", "link", "add", "eth1", "type", "veth", "peer", "name", "eth0",
                "netns", self.peer_ns)
        self.ns(self.agent_ns, "ip", "addr", "add", f"{agent_up}/24", "dev", "eth0")
        self.ns(self.agent_ns, "ip", "addr", "add", f"{agent_addr}/24", "dev", "eth1")
        self.ns(self.peer_ns, "ip", "addr", "add", f"{peer_addr}/24", "dev", "eth0")
        for ns, links in ((self.agent_ns, ("lo", "eth0", "eth1")), (self.peer_ns, ("lo", "eth0"))):
            for link in links:
                self.ns(ns, "ip", "link", "set", link, "up")

    def ns(self, ns: str, *cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run("ip", "netns", "exec", ns, *cmd, check=check)

    def spawn(self, ns: str, *cmd: str, log: Path | None = None, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """A long-running process inside `ns`, killed by `close()`."""
        out = log.open("ab") if log is not None else subprocess.DEVNULL
        proc = subprocess.Popen(["ip", "netns", "exec", ns, *cmd], stdout=out, stderr=subprocess.STDOUT,
                                env=env, cwd=ROOT, start_new_session=True)
        self.processes.append(proc)
        return proc

    def wait_port(self, ns: str, port: int, proto: str = "tcp", timeout: float = 10.0) -> None:
        flag = "-ltn" if proto == "tcp" else "-lun"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = self.ns(ns, "ss", "-H", flag, f"sport = :{port}", check=False).stdout
            if out.strip():
                return
            time.sleep(0.05)
        raise TimeoutError(f"nothing listens on {proto} port {port} in {ns}")

    def stop(self, proc: subprocess.Popen[bytes], timeout: float = 10.0) -> int | None:
        """SIGTERM the process group of one spawned process; SIGKILL if it lingers."""
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout)
            except ProcessLookupError:
                pass
        return proc.returncode

    def close(self) -> None:
        for proc in reversed(self.processes):
            self.stop(proc)
        self.processes.clear()
        for ns in (self.agent_ns, self.peer_ns):
            # Anything else still running in the namespace (started by a test) goes too.
            pids = run("ip", "netns", "pids", ns, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            run("ip", "netns", "del", ns, check=False)
        run("ip", "link", "del", self.root_if, check=False)
