"""The files between the supervisor and the capture process: what to capture (spec) and how it goes (status).

Both live in the capture's control directory (`<state_dir>/capture/`, 0700) and are replaced
atomically (write to a temporary file, rename), so a reader never sees half a document.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

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
