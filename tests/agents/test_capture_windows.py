"""Windows SIO_RCVALL capture, driven through a fake Winsock with recorded datagrams."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import pytest

from agents.capture.windows import SIO_RCVALL, RcvallCapture, decode_rcvall_datagram
from agents.config import AgentConfig
from agents.decode import Decoder, DirectionResolver
from agents.errors import CaptureError
from agents.model import INBOUND, OUTBOUND, CapturedPacket, ip_int
from tests.agents.conftest import FIXTURES

HOST = "192.168.46.2"
DATAGRAMS = [bytes.fromhex(line) for line in (FIXTURES / "windows-rcvall-datagrams.hex").read_text().split()]


class FakeSocket:
    def __init__(self, address: str, datagrams: list[bytes]) -> None:
        self.address = address
        self.queue = deque(datagrams)
        self.closed = False

    def recv(self, size: int) -> bytes:
        if not self.queue:
            raise BlockingIOError
        return self.queue.popleft()[:size]

    def fileno(self) -> int:
        return 3

    def close(self) -> None:
        self.closed = True


class FakeWinsock:
    def __init__(self, addresses: list[str], datagrams: list[bytes], fail_rcvall: bool = False) -> None:
        self.addresses = addresses
        self.datagrams = datagrams
        self.fail_rcvall = fail_rcvall
        self.sockets: list[FakeSocket] = []
        self.rcvall_calls: list[tuple[str, bool]] = []

    def local_addresses(self) -> list[str]:
        return self.addresses

    def open(self, address: str) -> FakeSocket:
        sock = FakeSocket(address, self.datagrams if address == HOST else [])
        self.sockets.append(sock)
        return sock

    def rcvall(self, sock: FakeSocket, on: bool) -> None:
        if self.fail_rcvall:
            raise OSError(10013, "An attempt was made to access a socket in a way forbidden by its access permissions")
        self.rcvall_calls.append((sock.address, on))

    def wait(self, sockets: Sequence[FakeSocket], timeout: float) -> Sequence[FakeSocket]:
        return [s for s in sockets if s.queue]


class ListSink:
    def __init__(self) -> None:
        self.packets: list[CapturedPacket] = []

    def submit(self, item: CapturedPacket, block: bool = False) -> None:
        self.packets.append(item)


def test_sio_rcvall_is_the_documented_ioctl_code() -> None:
    ioc_in, ioc_vendor = 0x80000000, 0x18000000
    assert SIO_RCVALL == ioc_in | ioc_vendor | 1


def test_every_address_gets_rcvall_and_recorded_datagrams_decode_both_ways() -> None:
    api = FakeWinsock([HOST, "10.0.0.7"], DATAGRAMS)
    decoder = Decoder(DirectionResolver())
    capture = RcvallCapture.open(AgentConfig(), decoder, api)
    assert api.rcvall_calls == [(HOST, True), ("10.0.0.7", True)]
    sink = ListSink()
    assert capture.poll(sink, 0.0) == 9
    assert [p.direction for p in sink.packets] == [OUTBOUND, INBOUND, OUTBOUND, OUTBOUND, INBOUND, INBOUND,
                                                   OUTBOUND, OUTBOUND, INBOUND]
    hello = sink.packets[3]
    assert (hello.local_ip, hello.local_port, hello.remote_ip, hello.remote_port) == \
        (ip_int(HOST), 49905, ip_int("91.254.215.167"), 443)
    assert (hello.size, len(hello.payload), hello.tcp_flags) == (144, 104, 0x18)
    assert hello.payload[:3] == b"\x16\x03\x01"  # a TLS handshake record, as recorded
    capture.close()
    assert api.rcvall_calls[2:] == [(HOST, False), ("10.0.0.7", False)]
    assert all(s.closed for s in api.sockets)


def test_interfaces_are_addresses_and_unknown_ones_are_named() -> None:
    api = FakeWinsock([HOST], DATAGRAMS)
    with pytest.raises(CaptureError, match="10.1.1.1 is not an address of this host"):
        RcvallCapture.open(AgentConfig(interfaces=("10.1.1.1",)), Decoder(DirectionResolver()), api)


def test_rcvall_refused_means_not_administrator() -> None:
    api = FakeWinsock([HOST], DATAGRAMS, fail_rcvall=True)
    with pytest.raises(CaptureError, match="Administrator"):
        RcvallCapture.open(AgentConfig(), Decoder(DirectionResolver()), api)
    assert all(s.closed for s in api.sockets)


def test_ipv6_and_runt_datagrams_are_counted() -> None:
    decoder = Decoder(DirectionResolver([ip_int(HOST)]))
    assert decode_rcvall_datagram(decoder, bytes([0x60]) + b"\0" * 39, 0) is None
    assert decode_rcvall_datagram(decoder, b"", 0) is None
    assert decode_rcvall_datagram(decoder, DATAGRAMS[3][:30], 0) is None
    assert decoder.stats.skipped == {"ipv6": 1, "non_ip": 1, "truncated": 1}


def test_registry_values_written_by_enrollment_become_config() -> None:
    from agents.config import load_config
    from agents.windows_service import settings_from_registry

    values = {"TargetUrl": "https://appliance.lan:50051", "MachineId": "4c4c4544-0042", "ServerName": "sensor-appliance",
              "CertDir": r"C:\Program Files\SensorAgent\certs"}
    config = load_config(None, settings_from_registry(values))
    assert (config.target, config.server_name, config.machine_id) == ("appliance.lan:50051", "sensor-appliance",
                                                                     "4c4c4544-0042")
    assert config.key == r"C:\Program Files\SensorAgent\certs\agent.key"
