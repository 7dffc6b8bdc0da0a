"""Packets as the flow table keeps them: the lean tuple of the hot path and its full form.

The ingest side validates wire messages into `RawPacket` tuples (in C); the flow side keeps a few of
them per flow and expands those into `Packet` objects with their DNS or ICMP metadata parsed. Both
helpers live here, with the flows, so that data goes one way: ingest -> flows -> analysis.
"""

from __future__ import annotations

from appliance.flows.dns import parse_dns, parse_dns_tcp
from appliance.model import DnsMessage, IcmpInfo, Packet, Transport

_TRANSPORTS = {1: Transport.ICMP, 6: Transport.TCP, 17: Transport.UDP}
_DNS_PORT = 53

# A validated packet in its lean form, as the flow tracker consumes it on the hot path:
# (timestamp_ns, direction, protocol, local_ip, remote_ip, local_port, remote_port, size,
#  payload, tcp_flags, pid, process_name). The payload is already cut to the limit and, for
# outbound UDP, stripped of its UDP header. `expand()` turns one into a full `Packet`.
RawPacket = tuple


def expand(raw: RawPacket) -> Packet:
    """The full Packet of a raw packet: transport, and DNS or ICMP metadata parsed."""
    ts, direction, protocol, local_ip, remote_ip, local_port, remote_port, size, payload, flags, pid, name = raw
    dns = None
    icmp = None
    if payload:
        if protocol == 17 or protocol == 6:
            if remote_port == _DNS_PORT or local_port == _DNS_PORT:
                dns = dns_message(raw)
        elif protocol == 1 and len(payload) >= 4:
            icmp = IcmpInfo(payload[0], payload[1], payload[4:])
    return Packet(
        ts, direction, protocol, _TRANSPORTS.get(protocol, Transport.OTHER), local_ip, remote_ip,
        local_port, remote_port, size, payload, flags, pid, name, dns, icmp,
    )


def dns_message(raw: RawPacket) -> DnsMessage | None:
    """The DNS message of a raw port-53 packet: UDP, or TCP with its length prefix."""
    if raw[2] == 6:
        return parse_dns_tcp(raw[8], raw[0])
    return parse_dns(raw[8], raw[0])
