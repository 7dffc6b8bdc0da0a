"""Shared by the per-OS spec files: what goes into every one-file agent and what never does."""

from pathlib import Path

REPO = Path(SPECPATH).resolve().parents[1]  # noqa: F821 (SPECPATH is set by PyInstaller)
ENTRY = str(Path(SPECPATH) / "entry.py")  # noqa: F821

HIDDEN = [
    "agents.generated.sensor_pb2",
    "agents.generated.sensor_pb2_grpc",
    "agents.capture.linux",
    "agents.capture.macos",
    "agents.capture.windows",
    "agents.attribution",
    "agents.processes",
]
# The agent must never carry the appliance (or its heavy dependencies): it is frozen separately.
EXCLUDES = [
    "appliance", "concierge", "tests", "bench", "numpy", "pydantic", "bottle", "cheroot", "cryptography",
    "grpc_tools", "yaml", "tkinter", "pytest", "PyInstaller",  # pyroute2 needs unittest
]
