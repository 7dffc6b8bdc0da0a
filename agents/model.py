"""The agent's own types. Generated protobuf classes appear only in `agents.wire`."""

from __future__ import annotations

from dataclasses import dataclass

OUTBOUND = 1
INBOUND = 2


class CapturedPacket:
    """One decoded IPv4 packet from the agent's point of view (fields mirror NetworkPacket)."""

    __slots__ = ("timestamp_ms", "direction", "local_ip", "remote_ip", "local_port", "remote_port",
                 "protocol", "size", "payload", "tcp_flags", "pid", "process_name")

    def __init__(self, timestamp_ms: int, direction: int, local_ip: int, remote_ip: int, local_port: int,
                 remote_port: int, protocol: int, size: int, payload: bytes, tcp_flags: int = 0) -> None:
        self.timestamp_ms = timestamp_ms
        self.direction = direction
        self.local_ip = local_ip
        self.remote_ip = remote_ip
        self.local_port = local_port
        self.remote_port = remote_port
        self.protocol = protocol
        self.size = size
        self.payload = payload
        self.tcp_flags = tcp_flags
        self.pid = 0
        self.process_name = ""

    def __repr__(self) -> str:
        return f"CapturedPacket({self.describe()})"

    def describe(self) -> str:
        """One greppable line, as `--dry-run` prints it."""
        arrow = "->" if self.direction == OUTBOUND else "<-"
        proto = {1: "icmp", 6: "tcp", 17: "udp"}.get(self.protocol, str(self.protocol))
        who = f" pid={self.pid} proc={self.process_name}" if self.pid else ""
        return (f"ts={self.timestamp_ms} {proto} {ip_str(self.local_ip)}:{self.local_port} {arrow} "
                f"{ip_str(self.remote_ip)}:{self.remote_port} size={self.size} payload={len(self.payload)} "
                f"flags=0x{self.tcp_flags:02x}{who}")


@dataclass(frozen=True, slots=True)
class ProcessEvent:
    """A process started or exited (for StreamProcesses)."""

    kind: str  # "start" or "exit"
    timestamp_ms: int
    pid: int
    ppid: int = 0
    name: str = ""
    path: str = ""
    command_line: str = ""
    user: str = ""
    exit_code: int = 0


def ip_str(value: int) -> str:
    """Dotted quad of an IPv4 integer."""
    return f"{value >> 24 & 255}.{value >> 16 & 255}.{value >> 8 & 255}.{value & 255}"


def ip_int(text: str) -> int:
    """IPv4 integer of a dotted quad; ValueError when it is not one."""
    parts = text.split(".")
    if len(parts) != 4:
        raise ValueError(f"not an IPv4 address: {text!r}")
    value = 0
    for part in parts:
        if not part.isdigit() or int(part) > 255:
            raise ValueError(f"not an IPv4 address: {text!r}")
        value = value << 8 | int(part)
    return value
