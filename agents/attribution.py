"""Process attribution on Linux: which process owns the local socket of a packet.

/proc/net/{tcp,udp} map local ports to socket inodes and /proc/<pid>/fd maps inodes to processes.
Both are read together on the sender thread (never on the capture thread), when a batch holds a
port that is neither known nor recently looked up in vain; at most every `min_interval` seconds.
A socket opened and closed within one flush interval can be missed: its packets carry pid 0.
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

    def __init__(self, proc: Path = Path("/proc"), min_interval: float = 0.1, miss_ttl: float = 2.0) -> None:
        self._proc = proc
        self._min_interval = min_interval
        self._miss_ttl = miss_ttl
        self._owners: dict[tuple[int, int], tuple[int, str]] = {}
        self._misses: dict[tuple[int, int], float] = {}
        self._refreshed = float("-inf")

    def enrich(self, packets: Sequence[CapturedPacket]) -> None:
        """Fill pid and process_name of TCP/UDP packets whose local socket is known."""
        unknown = []
        for packet in packets:
            proto = packet.protocol
            if proto != 6 and proto != 17:
                continue
            found = self._owners.get((proto, packet.local_port))
            if found is not None:
                packet.pid, packet.process_name = found
            else:
                unknown.append(packet)
        if not unknown:
            return
        now = time.monotonic()
        fresh = [p for p in unknown if self._misses.get((p.protocol, p.local_port), 0.0) < now]
        if not fresh:
            return
        wait = self._refreshed + self._min_interval - now
        if wait > 0:
            time.sleep(wait)  # bounded by min_interval; the sender thread may wait, capture never does
        self.refresh()
        expiry = time.monotonic() + self._miss_ttl
        for packet in fresh:
            key = (packet.protocol, packet.local_port)
            found = self._owners.get(key)
            if found is not None:
                packet.pid, packet.process_name = found
            else:
                self._misses[key] = expiry
        if len(self._misses) > 65536:
            self._misses = {k: v for k, v in self._misses.items() if v >= now}

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
