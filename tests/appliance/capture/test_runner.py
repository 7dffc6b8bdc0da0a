"""The capture process's protocol counting, packet by packet."""

from __future__ import annotations

from agents.model import OUTBOUND, CapturedPacket
from appliance.capture.runner import ProtocolCounter


class Collect:
    def __init__(self) -> None:
        self.items: list[CapturedPacket] = []

    def submit(self, item: CapturedPacket, block: bool = False) -> None:
        self.items.append(item)


def packet(proto: int, lport: int, rport: int, payload: bytes, size: int = 100) -> CapturedPacket:
    return CapturedPacket(0, OUTBOUND, 1, 2, lport, rport, proto, size, payload)


def test_transports_and_application_protocols_are_counted_and_every_packet_passes_on() -> None:
    sink = Collect()
    counter = ProtocolCounter(sink)  # type: ignore[arg-type]
    sent = [
        packet(17, 5353, 53, b"\x00" * 20),                       # DNS over UDP
        packet(6, 40000, 53, b"\x00\x1c" + b"\x00" * 28),          # DNS over TCP
        packet(6, 40001, 80, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),  # HTTP request head
        packet(6, 80, 40001, b"HTTP/1.1 200 OK\r\n\r\n"),            # HTTP response head
        packet(6, 80, 40001, b"body bytes, no head"),              # HTTP body: TCP only
        packet(6, 40002, 443, b"\x16\x03\x01\x02\x00" + b"\x01" * 10),  # TLS handshake record
        packet(6, 40002, 443, b"\x17\x03\x03\x00\x10" + b"\x00" * 16),  # TLS application data
        packet(6, 40002, 443, b""),                                # a bare ACK
        packet(1, 0, 0, b"\x08\x00\x00\x00"),                      # ICMP
        packet(47, 0, 0, b"gre"),                                  # another protocol: counted in packets only
    ]
    for item in sent:
        counter.submit(item)
    assert sink.items == sent
    assert counter.packets == 10 and counter.bytes == 1000
    assert counter.stats() == {"TCP": 7, "UDP": 1, "DNS": 2, "HTTP": 2, "TLS": 2, "ICMP": 1}
