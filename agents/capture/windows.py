"""Windows capture without a driver: one raw IPv4 socket per local address with SIO_RCVALL on.

What recv() returns on such a socket is the whole IPv4 packet, header first and in network byte
order, for both directions; there is no link layer and no packet type, so direction comes from the
host's addresses. The OS calls sit behind `RawSocketApi` so the loop is unit-tested here with
recorded datagrams; `WinsockApi` is the real one and only runs on Windows. Requires Administrator
(the service runs as LocalSystem). IPv6 would need a second socket family and is skipped like
everywhere else.
"""

from __future__ import annotations

import logging
import select
import socket
import time
from collections.abc import Sequence
from typing import Protocol

from agents.capture import Sink
from agents.config import AgentConfig
from agents.decode import ETH_IPV4, ETH_IPV6, Decoder
from agents.errors import CaptureError
from agents.model import CapturedPacket, ip_int

log = logging.getLogger(__name__)

SIO_RCVALL = 0x98000001  # _WSAIOW(IOC_VENDOR, 1)
RCVALL_OFF = 0
RCVALL_ON = 1
_MAX_DATAGRAM = 65535


class RawSocket(Protocol):
    def recv(self, size: int) -> bytes: ...

    def fileno(self) -> int: ...

    def close(self) -> None: ...


class RawSocketApi(Protocol):
    """The Windows calls the capture needs."""

    def local_addresses(self) -> list[str]: ...

    def open(self, address: str) -> RawSocket: ...

    def rcvall(self, sock: RawSocket, on: bool) -> None: ...

    def wait(self, sockets: Sequence[RawSocket], timeout: float) -> Sequence[RawSocket]: ...


class WinsockApi:  # pragma: no cover - Windows only
    """The real thing: Winsock raw sockets."""

    def local_addresses(self) -> list[str]:
        infos = socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)
        addresses = {str(info[4][0]) for info in infos}
        return sorted(a for a in addresses if not a.startswith("127."))

    def open(self, address: str) -> RawSocket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_IP)
        sock.bind((address, 0))
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_HDRINCL, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 * 1024 * 1024)
        sock.setblocking(False)
        return sock

    def rcvall(self, sock: RawSocket, on: bool) -> None:
        sock.ioctl(SIO_RCVALL, RCVALL_ON if on else RCVALL_OFF)  # type: ignore[attr-defined]

    def wait(self, sockets: Sequence[RawSocket], timeout: float) -> Sequence[RawSocket]:
        return select.select(list(sockets), [], [], timeout)[0]


class RcvallCapture:
    """Reads every raw socket until it would block; decodes each datagram on the calling thread."""

    def __init__(self, api: RawSocketApi, sockets: list[RawSocket], addresses: list[str], decoder: Decoder) -> None:
        self._api = api
        self._sockets = sockets
        self._addresses = addresses
        self._decoder = decoder

    @classmethod
    def open(cls, config: AgentConfig, decoder: Decoder, api: RawSocketApi | None = None) -> RcvallCapture:
        """`interfaces` on Windows are IPv4 addresses to listen on (SIO_RCVALL works per address)."""
        api = api or WinsockApi()
        available = api.local_addresses()
        wanted = list(config.interfaces) or available
        unknown = [a for a in wanted if a not in available]
        if unknown:
            raise CaptureError(f"interfaces: {', '.join(unknown)} is not an address of this host "
                               f"(have {', '.join(available)})")
        if not wanted:
            raise CaptureError("no IPv4 address to capture on")
        decoder.directions.set_local(ip_int(a) for a in available)
        sockets = []
        try:
            for address in wanted:
                sock = api.open(address)
                sockets.append(sock)
                api.rcvall(sock, True)
        except OSError as err:
            for sock in sockets:
                sock.close()
            raise CaptureError(f"SIO_RCVALL failed on {address}: {err} (the agent must run as Administrator)") from None
        return cls(api, sockets, wanted, decoder)

    def describe(self) -> str:
        return f"sio_rcvall addresses={','.join(self._addresses)}"

    def poll(self, sink: Sink, timeout: float) -> int:
        count = 0
        decoder = self._decoder
        for sock in self._api.wait(self._sockets, timeout):
            while True:
                try:
                    datagram = sock.recv(_MAX_DATAGRAM)
                except (BlockingIOError, InterruptedError):
                    break
                if not datagram:
                    break
                count += 1
                packet = decode_rcvall_datagram(decoder, datagram, time.time_ns())
                if packet is not None:
                    sink.submit(packet)
        return count

    def close(self) -> None:
        for sock in self._sockets:
            try:
                self._api.rcvall(sock, False)
            except OSError:
                pass
            sock.close()


def decode_rcvall_datagram(decoder: Decoder, datagram: bytes, timestamp_ns: int) -> CapturedPacket | None:
    """One SIO_RCVALL datagram (a bare IP packet) into a CapturedPacket, or None (counted)."""
    version = datagram[0] >> 4 if datagram else 0
    return decoder.decode_network(ETH_IPV4 if version == 4 else ETH_IPV6 if version == 6 else 0,
                                  datagram, 0, timestamp_ns, None)
