"""Linux capture: AF_PACKET (SOCK_DGRAM) sockets with a classic BPF filter attached in the kernel.

Needs CAP_NET_RAW only. Interfaces and this host's addresses come from netlink (pyroute2); the
addresses are re-read every `address_refresh` seconds so DHCP changes are followed.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import select
import socket
import struct
import time

from agents.capture import Sink
from agents.capture.bpf import agent_filter, pack
from agents.config import AgentConfig
from agents.decode import ETH_IPV6, Decoder
from agents.errors import CaptureError
from agents.model import ip_int

log = logging.getLogger(__name__)

ETH_P_ALL = 0x0003
SO_ATTACH_FILTER = 26
SO_RCVBUFFORCE = 33
SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_STATISTICS = 6
PACKET_MR_PROMISC = 1
_RCVBUF = 8 * 1024 * 1024
_TPACKET_STATS = struct.Struct("II")  # struct tpacket_stats: tp_packets, tp_drops


def interface_addresses() -> tuple[dict[str, int], set[int]]:
    """({interface name: index}, {IPv4 addresses of this host}) from netlink."""
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        links = {link.get_attr("IFLA_IFNAME"): link["index"] for link in ipr.get_links()}
        addresses = set()
        for addr in ipr.get_addr(family=socket.AF_INET):
            value = addr.get_attr("IFA_LOCAL") or addr.get_attr("IFA_ADDRESS")
            if value:
                addresses.add(ip_int(value))
    return links, addresses


def attach_filter(sock: socket.socket, program: bytes) -> None:
    """SO_ATTACH_FILTER with a struct sock_fprog pointing at `program` (the kernel copies it)."""
    buffer = ctypes.create_string_buffer(program)
    fprog = struct.pack("HL", len(program) // 8, ctypes.addressof(buffer))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)


def packet_socket(ifname: str, program: bytes, *, rcvbuf: int = _RCVBUF, promiscuous: bool = False) -> socket.socket:
    """A non-blocking AF_PACKET socket that never hands up an unfiltered frame.

    For one interface the socket is opened with protocol 0 (receives nothing), filtered, then bound.
    For every interface ("") it must be opened with ETH_P_ALL (Python cannot bind to ifindex 0),
    so frames queued before the filter was attached are drained and thrown away.
    `promiscuous` (one interface only) is a packet-socket membership: the kernel counts it with the
    interface's other users and drops it when the socket closes, so a crash never leaves the NIC
    promiscuous.
    """
    protocol = 0 if ifname else socket.htons(ETH_P_ALL)
    try:
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, protocol)
    except PermissionError:
        raise CaptureError("AF_PACKET capture needs CAP_NET_RAW (run as root or grant the capability)") from None
    try:
        attach_filter(sock, program)
        try:
            sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, rcvbuf)
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        if ifname:
            sock.bind((ifname, ETH_P_ALL))
            if promiscuous:
                index = socket.if_nametoindex(ifname)
                # struct packet_mreq: ifindex, type, alen, address[8]
                sock.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, struct.pack("iHH8s", index, PACKET_MR_PROMISC, 0, b""))
    except OSError as err:
        sock.close()
        raise CaptureError(f"cannot capture on interface {ifname or 'any'!r}: {err.strerror}") from None
    sock.setblocking(False)
    if not ifname:
        try:
            while True:
                sock.recv(1)
        except BlockingIOError:
            pass
    return sock


class LinuxCapture:
    """Reads every socket until it would block; decodes each frame on the calling thread."""

    def __init__(self, sockets: list[socket.socket], decoder: Decoder, names: list[str],
                 address_refresh: float = 10.0) -> None:
        self._sockets = sockets
        self._decoder = decoder
        self._names = names
        self._address_refresh = address_refresh
        self._next_refresh = time.monotonic() + address_refresh

    @classmethod
    def open(cls, config: AgentConfig, decoder: Decoder, exclude: list[tuple[int, int]], *,
             rcvbuf: int = _RCVBUF, promiscuous: bool = False) -> LinuxCapture:
        links, addresses = interface_addresses()
        decoder.directions.set_local(addresses)
        wanted = list(config.interfaces)
        unknown = [name for name in wanted if name not in links]
        if unknown:
            raise CaptureError(f"interfaces: no such interface {', '.join(unknown)} (have {', '.join(sorted(links))})")
        if wanted:
            program = pack(agent_filter(config.snaplen, exclude, None))
            sockets = [packet_socket(name, program, rcvbuf=rcvbuf, promiscuous=promiscuous) for name in wanted]
        else:
            # One socket on every interface, present and future; loopback dropped in the kernel.
            program = pack(agent_filter(config.snaplen, exclude, links.get("lo")))
            sockets = [packet_socket("", program, rcvbuf=rcvbuf)]
            wanted = ["all-but-lo"]
        return cls(sockets, decoder, wanted)

    def describe(self) -> str:
        return f"af_packet interfaces={','.join(self._names)} local={len(self._decoder.directions.local)}"

    def poll(self, sink: Sink, timeout: float) -> int:
        if time.monotonic() >= self._next_refresh:
            self._next_refresh = time.monotonic() + self._address_refresh
            try:
                self._decoder.directions.set_local(interface_addresses()[1])
            except OSError as err:
                log.warning("address refresh failed: %s", err)
        ready, _, _ = select.select(self._sockets, [], [], timeout)
        count = 0
        decode = self._decoder.decode_network
        submit = sink.submit
        for sock in ready:
            recv = sock.recvfrom
            while True:
                try:
                    frame, address = recv(65536)
                except BlockingIOError:
                    break
                except OSError as err:
                    if err.errno == errno.ENETDOWN:  # interface went down: keep the others going
                        break
                    raise
                count += 1
                ethertype = address[1]
                if ethertype == ETH_IPV6:
                    self._decoder.stats.skip("ipv6")
                    continue
                packet = decode(ethertype, frame, 0, time.time_ns(), address[2])
                if packet is not None:
                    submit(packet)
        return count

    def kernel_stats(self) -> tuple[int, int]:
        """(frames received, frames dropped) by the kernel since the last call, over every socket."""
        received = dropped = 0
        for sock in self._sockets:
            packets, drops = _TPACKET_STATS.unpack(sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, _TPACKET_STATS.size))
            received += packets
            dropped += drops
        return received, dropped

    def close(self) -> None:
        for sock in self._sockets:
            sock.close()
