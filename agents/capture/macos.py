"""macOS capture from BPF devices (/dev/bpf*): one per interface, records parsed from bpf_hdr.

A read() on a BPF device returns a buffer of records, each a `struct bpf_hdr` (Darwin's
<net/bpf.h>: a 32-bit timeval, caplen, datalen, hdrlen) followed by `caplen` bytes of the frame,
the next record starting at BPF_WORDALIGN(hdrlen + caplen), alignment 4 on Darwin. `hdrlen` is not
a constant (the kernel pads so the network header is aligned), so it is read from each record. The
device calls sit behind `BpfApi` so the parsing and the loop are unit-tested with recorded buffers;
`DarwinBpfApi` only runs on macOS and needs root (or the access_bpf group).
"""

from __future__ import annotations

import errno
import logging
import os
import select
import struct
import subprocess
from collections.abc import Iterator, Sequence
from typing import NamedTuple, Protocol

from agents.capture import Sink
from agents.config import AgentConfig
from agents.decode import Decoder
from agents.errors import CaptureError
from agents.model import ip_int

log = logging.getLogger(__name__)

# ioctl numbers from Darwin's <net/bpf.h> (_IOR/_IOW('B', n, type)).
BIOCGBLEN = 0x40044266
BIOCSBLEN = 0xC0044266
BIOCSETIF = 0x8020426C
BIOCIMMEDIATE = 0x80044270
BIOCGDLT = 0x4004426A
BIOCSSEESENT = 0x80044277
BPF_ALIGNMENT = 4
BPF_HDR = struct.Struct("=iiIIH")  # tv_sec, tv_usec (timeval32), caplen, datalen, hdrlen: 18 bytes
_BUFFER = 1 << 20


class BpfRecord(NamedTuple):
    timestamp_ns: int
    frame: bytes
    original_length: int


def wordalign(n: int) -> int:
    return (n + BPF_ALIGNMENT - 1) & ~(BPF_ALIGNMENT - 1)


def parse_bpf_buffer(buffer: bytes) -> Iterator[BpfRecord]:
    """The records of one read() from a BPF device; a damaged tail ends the buffer quietly."""
    offset = 0
    end = len(buffer)
    while offset + BPF_HDR.size <= end:
        seconds, micros, caplen, datalen, hdrlen = BPF_HDR.unpack_from(buffer, offset)
        if hdrlen < BPF_HDR.size or offset + hdrlen + caplen > end or caplen > datalen:
            log.debug("bpf buffer damaged at offset %d", offset)
            return
        start = offset + hdrlen
        yield BpfRecord((seconds & 0xFFFFFFFF) * 1_000_000_000 + micros * 1000, buffer[start : start + caplen], datalen)
        offset += wordalign(hdrlen + caplen)


class BpfDevice(Protocol):
    def fileno(self) -> int: ...


class BpfApi(Protocol):
    """The Darwin calls the capture needs."""

    def interfaces(self) -> list[str]: ...

    def local_addresses(self) -> set[int]: ...

    def open(self, interface: str, snaplen: int) -> tuple[int, int, int]: ...  # fd, buffer length, link type

    def read(self, fd: int, size: int) -> bytes: ...

    def wait(self, fds: Sequence[int], timeout: float) -> Sequence[int]: ...

    def close(self, fd: int) -> None: ...


class DarwinBpfApi:  # pragma: no cover - macOS only
    """The real thing: /dev/bpf* and ioctl."""

    def interfaces(self) -> list[str]:
        import socket

        return [name for _, name in socket.if_nameindex() if not name.startswith("lo")]

    def local_addresses(self) -> set[int]:
        out = subprocess.run(["/sbin/ifconfig"], capture_output=True, text=True, timeout=10).stdout
        return {ip_int(line.split()[1]) for line in out.splitlines() if line.strip().startswith("inet ")}

    def open(self, interface: str, snaplen: int) -> tuple[int, int, int]:
        import fcntl

        for n in range(256):
            try:
                fd = os.open(f"/dev/bpf{n}", os.O_RDWR)
                break
            except OSError as err:
                if err.errno == errno.EBUSY:
                    continue
                raise
        else:
            raise OSError(errno.EBUSY, "every /dev/bpf device is busy")
        try:
            fcntl.ioctl(fd, BIOCSBLEN, struct.pack("I", _BUFFER))
            fcntl.ioctl(fd, BIOCSETIF, struct.pack("16s16x", interface.encode()))
            fcntl.ioctl(fd, BIOCIMMEDIATE, struct.pack("I", 1))
            fcntl.ioctl(fd, BIOCSSEESENT, struct.pack("I", 1))
            buflen = struct.unpack("I", fcntl.ioctl(fd, BIOCGBLEN, struct.pack("I", 0)))[0]
            dlt = struct.unpack("I", fcntl.ioctl(fd, BIOCGDLT, struct.pack("I", 0)))[0]
        except OSError:
            os.close(fd)
            raise
        os.set_blocking(fd, False)
        return fd, buflen, dlt

    def read(self, fd: int, size: int) -> bytes:
        return os.read(fd, size)

    def wait(self, fds: Sequence[int], timeout: float) -> Sequence[int]:
        return select.select(list(fds), [], [], timeout)[0]

    def close(self, fd: int) -> None:
        os.close(fd)


class _Device(NamedTuple):
    fd: int
    interface: str
    buflen: int
    linktype: int


class BpfDeviceCapture:
    """Reads every BPF device that is ready; decodes each record on the calling thread."""

    def __init__(self, api: BpfApi, devices: list[_Device], decoder: Decoder, snaplen: int) -> None:
        self._api = api
        self._devices = {d.fd: d for d in devices}
        self._decoder = decoder
        self._snaplen = snaplen

    @classmethod
    def open(cls, config: AgentConfig, decoder: Decoder, api: BpfApi | None = None) -> BpfDeviceCapture:
        api = api or DarwinBpfApi()
        available = api.interfaces()
        wanted = list(config.interfaces) or available
        unknown = [name for name in wanted if name not in available]
        if unknown:
            raise CaptureError(f"interfaces: no such interface {', '.join(unknown)} (have {', '.join(available)})")
        decoder.directions.set_local(api.local_addresses())
        devices: list[_Device] = []
        for name in wanted:
            try:
                fd, buflen, dlt = api.open(name, config.snaplen)
            except OSError as err:
                for device in devices:
                    api.close(device.fd)
                raise CaptureError(f"cannot open a BPF device on {name}: {err} (run as root)") from None
            devices.append(_Device(fd, name, buflen, dlt))
        return cls(api, devices, decoder, config.snaplen)

    def describe(self) -> str:
        return "bpf " + ",".join(f"{d.interface}(dlt={d.linktype})" for d in self._devices.values())

    def poll(self, sink: Sink, timeout: float) -> int:
        count = 0
        decode = self._decoder.decode
        snaplen = self._snaplen
        for fd in self._api.wait(list(self._devices), timeout):
            device = self._devices[fd]
            try:
                buffer = self._api.read(fd, device.buflen)
            except BlockingIOError:
                continue
            for record in parse_bpf_buffer(buffer):
                count += 1
                packet = decode(device.linktype, record.frame[:snaplen], record.timestamp_ns)
                if packet is not None:
                    sink.submit(packet)
        return count

    def close(self) -> None:
        for fd in self._devices:
            self._api.close(fd)
