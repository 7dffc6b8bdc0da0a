"""The files between the supervisor and the capture process: what to capture (spec) and how it goes (status).

Both live in the capture's control directory (`<state_dir>/capture/`, 0700) and are replaced
atomically (write to a temporary file, rename), so a reader never sees half a document.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

SPEC_FILE = "spec.json"
STATUS_FILE = "status.json"
CERT_FILE = "capture.pem"
KEY_FILE = "capture.key"
CA_FILE = "ca.pem"


class RunnerSpec(BaseModel):
    """What the capture process does; written by the supervisor."""

    model_config = ConfigDict(extra="forbid")

    running: bool
    generation: int
    interface: str
    promiscuous: bool = False
    snaplen: int = 65535
    buffer_bytes: int = 64 * 1024 * 1024
    target: str
    server_name: str = ""
    insecure: bool = False
    internal_networks: list[str]
    version: str = ""


Count = Annotated[int, Field(ge=0, le=1 << 62)]


class RunnerStatus(BaseModel):
    """What the capture process reports; parsed whole by the supervisor (another process wrote it)."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    generation: int
    state: Literal["idle", "running", "error"]
    error: Annotated[str, Field(max_length=2000)] | None = None
    pid: int | None = None
    heartbeat: float = 0.0
    packetCount: Count = 0
    byteCount: Count = 0
    droppedCount: Count = 0
    protocolStats: Annotated[dict[Annotated[str, Field(max_length=16)], Count], Field(max_length=16)] = Field(
        default_factory=dict)
    skipped: Annotated[dict[Annotated[str, Field(max_length=32)], Count], Field(max_length=32)] = Field(
        default_factory=dict)

    @classmethod
    def read(cls, path: Path) -> RunnerStatus | None:
        """The status at `path`; None when missing, unreadable or not a valid status."""
        data = read_json(path)
        if data is None:
            return None
        try:
            return cls.model_validate(data)
        except ValidationError:
            return None


def write_json(path: Path, payload: dict[str, Any]) -> None:
    """Replace `path` atomically with `payload` (mode 0600)."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(payload, handle)
    os.replace(temporary, path)


def read_json(path: Path) -> dict[str, Any] | None:
    """The document at `path`, or None when it is missing or unreadable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
