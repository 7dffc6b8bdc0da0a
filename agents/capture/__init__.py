"""Live capture per OS behind one small interface; `open_capture` picks the implementation."""

from __future__ import annotations

import sys
from typing import Protocol

from agents.config import AgentConfig
from agents.decode import Decoder
from agents.errors import CaptureError
from agents.model import CapturedPacket


class Sink(Protocol):
    def submit(self, item: CapturedPacket, block: bool = False) -> None: ...


class Capture(Protocol):
    """A running capture: `poll` decodes what arrived within `timeout` seconds into the sink."""

    def poll(self, sink: Sink, timeout: float) -> int: ...

    def close(self) -> None: ...

    def describe(self) -> str: ...


def open_capture(config: AgentConfig, decoder: Decoder, exclude: list[tuple[int, int]]) -> Capture:
    """The capture of this OS, started on the configured interfaces."""
    if sys.platform.startswith("linux"):
        from agents.capture.linux import LinuxCapture

        return LinuxCapture.open(config, decoder, exclude)
    if sys.platform == "darwin":  # pragma: no cover - macOS only
        from agents.capture.macos import BpfDeviceCapture

        return BpfDeviceCapture.open(config, decoder)
    if sys.platform == "win32":  # pragma: no cover - Windows only
        from agents.capture.windows import RcvallCapture

        return RcvallCapture.open(config, decoder)
    raise CaptureError(f"live capture is not supported on {sys.platform}; use --pcap")
