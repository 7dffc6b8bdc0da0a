"""The appliance's own port capture: a supervised capture process on a local (mirror/SPAN) interface.

`interfaces` lists links from netlink; `supervisor` starts, watches and restarts the capture
process (`python -m appliance.capture`, the agents' AF_PACKET + BPF capture, decoder and batching
streaming into this appliance's gRPC ingestion under an identity of its own); `linkwatch` turns a
link that goes down or vanishes into an `error` state; `state` keeps what must survive a restart.
"""

from __future__ import annotations

from appliance.errors import ApplianceError


class CaptureError(ApplianceError):
    """Root of the capture package's errors."""


class UnknownInterface(CaptureError):
    """The requested interface does not exist (or cannot capture); the message names it."""


class AlreadyRunning(CaptureError):
    """A capture is already running; stop it first."""
