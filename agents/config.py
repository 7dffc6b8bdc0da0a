"""Agent configuration: a file written by the enrollment script, overridable by flags.

The file is either JSON (`{"target": ...}`) or flat `key: value` / `key = value` lines (a YAML or
INI subset; `#` starts a comment; lists are comma-separated). It is parsed once, here; every bad
key or value is reported in one pass with the file and line.
"""

from __future__ import annotations

import json
import platform
import socket
import sys
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from agents.errors import ConfigError

# Where the enrollment scripts (installer/) write the configuration. On Windows enrollment writes
# the registry instead (HKLM\SOFTWARE\<product>, see agents/windows_service.py); a file still wins.
DEFAULT_CONFIG_PATHS = {
    "linux": Path("/etc/sensor-agent/agent.yaml"),
    "darwin": Path("/etc/sensor-agent/agent.yaml"),
    "win32": Path(r"C:\ProgramData\SensorAgent\agent.yaml"),
}


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """Everything the agent needs to run; see docs/agents.md for each key."""

    target: str = ""                       # appliance gRPC address, host:port
    target_url: str = ""                   # the same as enrollment writes it: https://host:port (http: plaintext)
    product: str = ""                      # product name written by enrollment (logged only)
    ca_cert: str = ""                      # CA that signed the appliance's server certificate
    cert: str = ""                         # this agent's client certificate (PEM)
    key: str = ""                          # its private key (PEM)
    server_name: str = ""                  # TLS name to expect when `target` is an address not in the cert
    insecure: bool = False                 # plaintext gRPC, for appliances run with grpc.tls: false
    machine_id: str = ""                   # default: /etc/machine-id (or the OS equivalent)
    hostname: str = ""                     # default: this host's name
    interfaces: tuple[str, ...] = ()       # empty: every interface but loopback
    snaplen: int = 2048                    # bytes kept of each frame
    batch_size: int = 256                  # packets per PacketBatch
    flush_interval: float = 0.5            # seconds a partial batch may wait
    queue_size: int = 50_000               # packets buffered while the appliance is away (drop-oldest)
    backoff_initial: float = 0.5           # seconds before the first reconnect
    backoff_max: float = 30.0
    processes: bool = True                 # stream process start/exit events (Linux)
    process_interval: float = 2.0          # seconds between process table scans

    def validate(self, source: str) -> AgentConfig:
        problems = []
        if self.target_url and not self.target:
            parts = urlsplit(self.target_url)
            try:
                port = parts.port
            except ValueError:
                port = None
            if parts.scheme not in ("https", "http") or not parts.hostname or not port:
                problems.append(f"{source}: target_url: must be https://host:port (got {self.target_url!r})")
            else:
                host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
                insecure = self.insecure or parts.scheme == "http"
                return replace(self, target=f"{host}:{port}", insecure=insecure).validate(source)
        if self.snaplen < 64 or self.snaplen > 262144:
            problems.append(f"{source}: snaplen: must be 64..262144 (got {self.snaplen})")
        if self.batch_size < 1 or self.batch_size > 10_000:
            problems.append(f"{source}: batch_size: must be 1..10000 (got {self.batch_size})")
        if self.queue_size < self.batch_size:
            problems.append(f"{source}: queue_size: must be at least batch_size (got {self.queue_size})")
        if not 0 < self.flush_interval <= 60:
            problems.append(f"{source}: flush_interval: must be in (0, 60] seconds (got {self.flush_interval})")
        if not 0 < self.backoff_initial <= self.backoff_max:
            problems.append(f"{source}: backoff_initial: must be > 0 and <= backoff_max (got {self.backoff_initial})")
        if self.target:
            host, sep, port_text = self.target.rpartition(":")
            if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
                problems.append(f"{source}: target: must be host:port (got {self.target!r})")
        if problems:
            raise ConfigError("\n".join(problems))
        return self


_FIELDS = {f.name: f for f in fields(AgentConfig)}
_BOOL_WORDS = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}


def _coerce(name: str, value: Any, where: str) -> Any:
    kind = _FIELDS[name].type
    try:
        if kind == "bool":
            if isinstance(value, bool):
                return value
            return _BOOL_WORDS[str(value).strip().lower()]
        if kind == "int":
            if isinstance(value, bool):
                raise ValueError
            return int(value)
        if kind == "float":
            return float(value)
        if kind.startswith("tuple"):
            items = value if isinstance(value, list) else str(value).split(",")
            return tuple(str(i).strip() for i in items if str(i).strip())
        return str(value).strip()
    except (KeyError, ValueError, TypeError):
        raise ConfigError(f"{where}: {name}: expected {kind} (got {value!r})") from None


def parse_config_text(text: str, source: str) -> dict[str, Any]:
    """Key/value pairs of a config file, coerced to their types; ConfigError lists every problem."""
    raw: list[tuple[str, Any, str]] = []
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ConfigError(f"{source}:{err.lineno}: invalid JSON: {err.msg}") from None
        raw = [(str(k), v, source) for k, v in data.items()]
    else:
        for number, line in enumerate(text.splitlines(), 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            key, sep, value = line.partition(":") if ":" in line.split("=", 1)[0] else line.partition("=")
            if not sep:
                raise ConfigError(f"{source}:{number}: expected `key: value` (got {line!r})")
            raw.append((key.strip(), value.strip().strip("'\""), f"{source}:{number}"))
    values: dict[str, Any] = {}
    problems = []
    for key, value, where in raw:
        if key not in _FIELDS:
            problems.append(f"{where}: {key}: unknown key")
            continue
        try:
            values[key] = _coerce(key, value, where)
        except ConfigError as err:
            problems.append(str(err))
    if problems:
        raise ConfigError("\n".join(problems))
    return values


def load_config(path: Path | None, overrides: dict[str, Any]) -> AgentConfig:
    """The config file (if any) with flag overrides on top, validated."""
    values: dict[str, Any] = {}
    source = "flags"
    if path is not None:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as err:
            raise ConfigError(f"{path}: cannot read: {err.strerror}") from None
        values = parse_config_text(text, str(path))
        source = str(path)
    for key, value in overrides.items():
        if value is not None:
            values[key] = _coerce(key, value, f"--{key.replace('_', '-')}")
    return replace(AgentConfig(), **values).validate(source)


def os_name() -> str:
    """The OS as the agent reports it in `x-agent-os`."""
    return {"linux": "linux", "darwin": "macos", "win32": "windows"}.get(sys.platform, sys.platform)


def default_machine_id() -> str:
    """A stable id of this machine: systemd's machine-id, the macOS/Windows equivalents, else the hostname."""
    for candidate in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            value = Path(candidate).read_text().strip()
        except OSError:
            continue
        if value:
            return value
    if sys.platform == "win32":  # pragma: no cover - Windows only
        import winreg

        with winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE, r"SOFTWARE\Microsoft\Cryptography") as key:
            return str(winreg.QueryValueEx(key, "MachineGuid")[0])
    return f"host-{socket.gethostname()}-{platform.machine()}"


@dataclass(frozen=True, slots=True)
class Identity:
    """How the agent describes itself on every stream (gRPC metadata)."""

    machine_id: str
    hostname: str
    os: str
    version: str
    extra: dict[str, str] = field(default_factory=dict)

    def metadata(self) -> list[tuple[str, str]]:
        pairs = [("x-machine-id", self.machine_id), ("x-agent-hostname", self.hostname),
                 ("x-agent-os", self.os), ("x-agent-version", self.version)]
        return pairs + sorted(self.extra.items())
