"""Process attribution on Linux: which process owns the local socket of a packet.

/proc/net/{tcp,udp} map local ports to socket inodes and /proc/<pid>/fd maps inodes to processes.
Both are read together, at most once per `refresh_interval` and only when a packet's port is not in
the cache, on the sender thread (never on the capture thread).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path

from agents.model import CapturedPacket

log = logging.getLogger(__name__)

_TABLES = {6: ("tcp",), 17: ("udp",)}


class SocketOwners:
    """(protocol, local port) -> (pid, process name), cached and refreshed on misses."""

    def __init__(self, proc: Path = Path("/proc"), refresh_interval: float = 2.0) -> None:
        self._proc = proc
        self._interval = refresh_interval
        self._owners: dict[tuple[int, int], tuple[int, str]] = {}
        self._refreshed = float("-inf")

    def enrich(self, packets: Sequence[CapturedPacket]) -> None:
        """Fill pid and process_name of TCP/UDP packets whose local socket is known."""
        owners = self._owners
        for packet in packets:
            proto = packet.protocol
            if proto != 6 and proto != 17:
                continue
            found = owners.get((proto, packet.local_port))
            if found is None and time.monotonic() - self._refreshed >= self._interval:
                self.refresh()
                owners = self._owners
                found = owners.get((proto, packet.local_port))
            if found is not None:
                packet.pid, packet.process_name = found

    def refresh(self) -> None:
        self._refreshed = time.monotonic()
        inodes: dict[int, tuple[int, int]] = {}
        for proto, names in _TABLES.items():
            for name in names:
                try:
                    lines = (self._proc / "net" / name).read_text().splitlines()[1:]
                except OSError:
                    continue
                for line in lines:
                    cols = line.split()
                    if len(cols) < 10:
                        continue
                    port = int(cols[1].rpartition(":")[2], 16)
                    inode = int(cols[9])
                    if inode:
                        inodes[inode] = (proto, port)
        owners: dict[tuple[int, int], tuple[int, str]] = {}
        if inodes:
            for entry in os.scandir(self._proc):
                if not entry.name.isdigit():
                    continue
                pid = int(entry.name)
                try:
                    fds = os.listdir(f"{entry.path}/fd")
                except OSError:
                    continue
                for fd in fds:
                    try:
                        link = os.readlink(f"{entry.path}/fd/{fd}")
                    except OSError:
                        continue
                    if link.startswith("socket:["):
                        key = inodes.get(int(link[8:-1]))
                        if key is not None and key not in owners:
                            owners[key] = (pid, _comm(entry.path))
        self._owners = owners


def _comm(proc_dir: str) -> str:
    try:
        with open(f"{proc_dir}/comm") as handle:
            return handle.read().strip()
    except OSError:
        return ""
