"""The appliance's own data types: packet, flow record, detection, alert.

Generated protobuf classes never travel past `appliance.ingest.convert`; everything downstream
works on these. IPv4 addresses stay integers on the hot path (cheap to hash and compare) and are
rendered to dotted strings only where a person or JSON reads them.
"""

from __future__ import annotations

import enum
import socket
import struct
import uuid
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any


class Transport(enum.IntEnum):
    """IP protocol numbers the appliance understands; anything else is `OTHER`."""

    OTHER = 0
    ICMP = 1
    TCP = 6
    UDP = 17


class Direction(enum.IntEnum):
    """Direction of a packet as seen from the agent (same numbers as the wire contract)."""

    UNSPECIFIED = 0
    OUTBOUND = 1
    INBOUND = 2


# TCP flag bits (RFC 793 + ECN), as carried in NetworkPacket.tcp_flags.
TCP_FIN = 0x01
TCP_SYN = 0x02
TCP_RST = 0x04
TCP_PSH = 0x08
TCP_ACK = 0x10

_PACK_U32 = struct.Struct("!I").pack


@lru_cache(maxsize=65536)
def ip_str(value: int) -> str:
    """Render an IPv4 address held as an integer in dotted form (10.0.0.1 for 167772161)."""
    return socket.inet_ntoa(_PACK_U32(value))


def ip_int(text: str) -> int:
    """Parse a dotted IPv4 address into its integer value."""
    return int.from_bytes(socket.inet_aton(text), "big")


@dataclass(slots=True)
class DnsAnswer:
    """One resource record of a DNS answer section."""

    name: str
    rtype: int
    ttl: int
    data: str  # address for A/AAAA, target for CNAME/NS/PTR/MX, text for TXT, hex otherwise


@dataclass(slots=True)
class DnsMessage:
    """The metadata of one DNS message parsed from a port-53 payload (or a resolver event)."""

    id: int
    is_response: bool
    rcode: int
    qname: str  # lower-case, no trailing dot; "" when the message has no question
    qtype: int
    qclass: int
    answers: list[DnsAnswer] = field(default_factory=list)
    malformed: bool = False  # parsing stopped early; the fields above hold what could be read
    timestamp_ns: int = 0


@dataclass(slots=True)
class IcmpInfo:
    """Type, code and data of one ICMP message."""

    type: int
    code: int
    data: bytes  # everything after the 4-byte ICMP header (identifier/sequence included for echo)


class _Addresses:
    """Dotted addresses of the `local_ip`/`remote_ip` integers (no instance dict: the dataclasses use slots)."""

    __slots__ = ()
    local_ip: int
    remote_ip: int

    @property
    def local_addr(self) -> str:
        return ip_str(self.local_ip)

    @property
    def remote_addr(self) -> str:
        return ip_str(self.remote_ip)


@dataclass(slots=True)
class Packet(_Addresses):
    """One packet's metadata after conversion from the wire contract."""

    timestamp_ns: int
    direction: int  # Direction value
    protocol: int  # IP protocol number as sent
    transport: Transport
    local_ip: int
    remote_ip: int
    local_port: int
    remote_port: int
    size: int
    payload: bytes  # transport payload; the UDP header of outbound UDP is already stripped
    tcp_flags: int = 0
    pid: int = 0
    process_name: str = ""
    dns: DnsMessage | None = None
    icmp: IcmpInfo | None = None


@dataclass(slots=True)
class FlowRecord(_Addresses):
    """A finished (expired, closed, flushed or evicted) flow handed to analysis.

    "out" is from the agent towards the remote side, "in" the reverse. `samples` keeps the first
    payload-bearing packets of the flow (bounded) for the DPI layer; `dns` keeps its DNS messages.
    """

    flow_id: str
    agent_id: str
    protocol: int
    transport: Transport
    local_ip: int
    local_port: int
    remote_ip: int
    remote_port: int
    first_ns: int
    last_ns: int
    packets_out: int = 0
    packets_in: int = 0
    bytes_out: int = 0
    bytes_in: int = 0
    payload_bytes_out: int = 0
    payload_bytes_in: int = 0
    tcp_flags: int = 0  # OR of every flag seen
    pid: int = 0
    process_name: str = ""
    end_reason: str = ""  # idle | active | tcp_close | stream_end | evicted | shutdown
    # A list; read from a flow record batch (the analysis process, an analyzer), a native DnsList: a read-only
    # sequence of the same DnsMessages, made only when Python asks (appliance/native/dns_list.h).
    dns: list[DnsMessage] = field(default_factory=list)
    samples: list[Packet] = field(default_factory=list)
    # The REST flow view's TLS object (JA4/JA4S/JA3, SNI, ALPN, leaf certificate: detection.dpi.tls_meta),
    # set once by analysis when the samples hold a hello. A plain dict of strings, not the parsed hellos:
    # finished flows stay in memory, and thousands of small tracked objects would make every full
    # garbage collection slower.
    tls: dict[str, Any] | None = None
    # Payload samples and DNS messages the C flow table kept as FlowRecord.samples and FlowRecord.dns
    # entries of proto/flow_record.proto (every flow but ICMP): no Python object per kept packet on the
    # ingest path. They join `samples` and `dns` when a flow is analysed in this process or viewed
    # (appliance.flows.record_codec.expanded), or travel as they are to the analysis process.
    kept_wire: bytes = field(default=b"", repr=False)

    @property
    def duration_s(self) -> float:
        return (self.last_ns - self.first_ns) / 1e9


class Severity(enum.IntEnum):
    """Ordered severity levels; rendered capitalised on the wire."""

    LOW = 1
    MEDIUM = 2
    HIGH = 3
    CRITICAL = 4

    @property
    def label(self) -> str:
        return self.name.capitalize()

    @classmethod
    def parse(cls, text: str) -> Severity:
        try:
            return cls[text.upper()]
        except KeyError:
            raise ValueError(f"unknown severity {text!r} (Low, Medium, High, Critical)") from None


class Category(str, enum.Enum):
    """The nine detection categories, PascalCase on the wire."""

    DNS_TUNNELING = "DnsTunneling"
    DGA = "DomainGeneration"
    DNS_FLOOD = "DnsFlood"
    RAW_IP_TLS = "RawIpTls"
    ICMP_COVERT_CHANNEL = "IcmpCovertChannel"
    HTTP_EXFILTRATION = "HttpExfiltration"
    HTTP_COVERT_CHANNEL = "HttpCovertChannel"
    BEACONING = "Beaconing"
    VOLUME_ANOMALY = "VolumeAnomaly"


@dataclass(slots=True)
class Detection:
    """One signal from one detector about one agent and indicator."""

    detector: str  # e.g. "dpi.dns_tunneling", "signature:SIG-001", "behaviour.beaconing"
    category: Category
    confidence: float  # 0.0 - 1.0
    severity: Severity
    agent_id: str
    indicator: str  # remote address or registered domain the detection is about
    evidence: dict[str, Any] = field(default_factory=dict)
    flow_ids: list[str] = field(default_factory=list)
    first_ns: int = 0
    last_ns: int = 0
    id: str = field(default_factory=lambda: str(uuid.uuid4()))
