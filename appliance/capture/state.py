"""What the capture remembers across appliance restarts: the last start request and autoStart."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from appliance.capture.spec import read_json, write_json

STATE_FILE = "capture.json"


class PersistedCapture(BaseModel):
    """The capture the appliance resumes at start when `autoStart` is true."""

    model_config = ConfigDict(extra="ignore")

    autoStart: bool = False
    interface: str | None = None
    promiscuous: bool = False
    snaplen: int = 65535
    bufferSize: int = 64


class CaptureStateStore:
    """`<control_dir>/capture.json`, replaced atomically."""

    def __init__(self, control_dir: Path) -> None:
        self._path = control_dir / STATE_FILE

    def load(self) -> PersistedCapture:
        data = read_json(self._path)
        try:
            return PersistedCapture.model_validate(data or {})
        except ValidationError:
            return PersistedCapture()

    def save(self, state: PersistedCapture) -> None:
        write_json(self._path, state.model_dump())
