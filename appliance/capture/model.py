"""The capture's REST shapes (request and replies), also the OpenAPI document's schemas."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

# Application protocols counted beside the transports; see `runner.ProtocolCounter` for the rules.
PROTOCOLS = ("TCP", "UDP", "DNS", "HTTP", "TLS", "ICMP")

CaptureState = Literal["idle", "running", "error"]


class StartRequest(BaseModel):
    """POST /api/v1/capture/start. Omitted fields take the console settings' `capture` section."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    interface: Annotated[str, Field(min_length=1, max_length=15, pattern=r"^[A-Za-z0-9_.:@-]+$")]
    promiscuous: bool | None = None
    snaplen: Annotated[int, Field(ge=64, le=65535)] | None = None
    bufferSize: Annotated[int, Field(ge=1, le=4096, description="kernel receive buffer in MiB")] | None = None


class InterfaceAddress(BaseModel):
    family: Literal["ipv4", "ipv6"]
    address: str
    prefixlen: int


class CaptureInterface(BaseModel):
    name: str
    index: int
    state: str = Field(description="operational state from netlink (up, down, lowerlayerdown, unknown...)")
    up: bool = Field(description="administratively up (IFF_UP)")
    mac: str | None
    addresses: list[InterfaceAddress]
    speed: int | None = Field(description="link speed in Mbit/s when the driver reports one")
    promiscuous: bool
    mtu: int | None


class InterfaceList(BaseModel):
    interfaces: list[CaptureInterface]


class CaptureStatus(BaseModel):
    """GET /api/v1/capture (and the reply of start and stop)."""

    status: CaptureState
    interface: str | None
    promiscuous: bool
    snaplen: int
    bufferSize: int
    autoStart: bool = Field(description="the capture starts again when the appliance starts")
    agentId: str | None = Field(description="the capture's agent id in /api/v1/agents (its own identity)")
    packetCount: int = Field(description="IPv4 packets decoded and streamed to the analysis")
    byteCount: int = Field(description="their IP bytes on the wire")
    droppedCount: int = Field(description="frames the kernel dropped + packets dropped from the stream queue")
    protocolStats: dict[str, int]
    skipped: dict[str, int] = Field(description="frames not turned into packets, by reason (ipv6, non_ip...)")
    uptime: float = Field(description="seconds since the capture started (0 when not running)")
    restarts: int = Field(description="times the capture process was restarted after it died")
    lastError: str | None
    lastErrorAt: str | None
    pid: int | None
