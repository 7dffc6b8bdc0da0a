"""Linux host facts from /proc: socket owners for packets, process start and exit events."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from agents.attribution import SocketOwners
from agents.model import OUTBOUND, CapturedPacket, ProcessEvent, ip_int
from agents.processes import ProcessWatcher
from tests.polling import wait_for

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux /proc")


def test_packet_of_a_local_socket_gets_its_process() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        packet = CapturedPacket(0, OUTBOUND, ip_int("127.0.0.1"), ip_int("127.0.0.2"), port, 53, 17, 40, b"")
        unknown = CapturedPacket(0, OUTBOUND, ip_int("127.0.0.1"), ip_int("127.0.0.2"), 1, 53, 17, 40, b"")
        icmp = CapturedPacket(0, OUTBOUND, ip_int("127.0.0.1"), ip_int("127.0.0.2"), 0, 0, 1, 84, b"")
        owners = SocketOwners()
        owners.enrich([packet, unknown, icmp])
    assert (packet.pid, packet.process_name) == (os.getpid(), open("/proc/self/comm").read().strip())
    assert (unknown.pid, icmp.pid) == (0, 0)


class Events:
    def __init__(self) -> None:
        self.items: list[ProcessEvent] = []

    def submit(self, item: ProcessEvent, block: bool = False) -> None:
        self.items.append(item)


def test_process_start_and_exit_are_reported() -> None:
    events = Events()
    watcher = ProcessWatcher(events, 1.0, threading.Event())
    watcher.scan(report=False)  # baseline
    child = subprocess.Popen(["sleep", "30"])
    try:
        # Popen returns once exec began; /proc/<pid>/cmdline can still read empty for a moment under load
        # (seen once in a full run). The watcher reports what /proc says when it scans: scan once it says it.
        cmdline = Path(f"/proc/{child.pid}/cmdline")
        assert wait_for(lambda: cmdline.read_bytes() == b"sleep\x0030\x00")
        watcher.scan()
        started = [e for e in events.items if e.pid == child.pid]
        assert [(e.kind, e.name, e.ppid) for e in started] == [("start", "sleep", os.getpid())]
        assert started[0].command_line == "sleep 30" and started[0].path.endswith("sleep")
    finally:
        child.kill()
        child.wait()
    watcher.scan()
    assert [(e.kind, e.name) for e in events.items if e.pid == child.pid] == [("start", "sleep"), ("exit", "sleep")]
