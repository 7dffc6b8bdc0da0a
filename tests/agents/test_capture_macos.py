"""macOS BPF device capture: bpf_hdr records parsed from a recorded read() buffer, a fake device."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from agents.capture.macos import (
    BIOCGBLEN,
    BIOCGDLT,
    BIOCIMMEDIATE,
    BIOCSBLEN,
    BIOCSETIF,
    BIOCSSEESENT,
    BpfDeviceCapture,
    parse_bpf_buffer,
)
from agents.config import AgentConfig
from agents.decode import Decoder, DirectionResolver
from agents.errors import CaptureError
from agents.model import INBOUND, OUTBOUND, ip_int
from agents.pcapfile import read_capture
from tests.agents.conftest import FIXTURES, PCAPS
from tests.agents.test_capture_windows import ListSink

BUFFER = (FIXTURES / "macos-bpf-read-en0.bin").read_bytes()
FRAMES = list(read_capture(PCAPS / "dns-benign-a-aaaa-mx.pcap"))


def ioc(direction: int, group: str, number: int, size: int) -> int:
    return direction | (size & 0x1FFF) << 16 | ord(group) << 8 | number


def test_ioctl_numbers_follow_darwin_macros() -> None:
    out, into = 0x40000000, 0x80000000
    assert BIOCGBLEN == ioc(out, "B", 102, 4)
    assert BIOCSBLEN == ioc(out | into, "B", 102, 4)
    assert BIOCSETIF == ioc(into, "B", 108, 32)  # struct ifreq
    assert BIOCIMMEDIATE == ioc(into, "B", 112, 4)
    assert BIOCGDLT == ioc(out, "B", 106, 4)
    assert BIOCSSEESENT == ioc(into, "B", 119, 4)


def test_recorded_read_holds_every_record_with_its_timestamp() -> None:
    records = list(parse_bpf_buffer(BUFFER))
    assert len(records) == 6
    assert [r.timestamp_ns for r in records] == [f.timestamp_ns for f in FRAMES]
    assert [r.frame for r in records[:5]] == [f.data for f in FRAMES[:5]]
    last = records[-1]
    assert (len(last.frame), last.original_length) == (96, len(FRAMES[-1].data))


def test_a_damaged_tail_ends_the_buffer_without_error() -> None:
    for cut in range(len(BUFFER)):
        records = list(parse_bpf_buffer(BUFFER[:cut]))
        assert len(records) <= 6
    garbage = bytearray(BUFFER)
    garbage[16:18] = b"\x02\x00"  # hdrlen smaller than the header itself
    assert list(parse_bpf_buffer(bytes(garbage))) == []


class FakeBpf:
    def __init__(self) -> None:
        self.opened: list[tuple[str, int]] = []
        self.closed: list[int] = []
        self.pending = {10: [BUFFER]}

    def interfaces(self) -> list[str]:
        return ["en0", "en1"]

    def local_addresses(self) -> set[int]:
        return {ip_int("10.16.1.11")}

    def open(self, interface: str, snaplen: int) -> tuple[int, int, int]:
        self.opened.append((interface, snaplen))
        return 10 + len(self.opened) - 1, 4096, 1

    def read(self, fd: int, size: int) -> bytes:
        if not self.pending.get(fd):
            raise BlockingIOError
        return self.pending[fd].pop(0)[:size]

    def wait(self, fds: Sequence[int], timeout: float) -> Sequence[int]:
        return [fd for fd in fds if self.pending.get(fd)]

    def close(self, fd: int) -> None:
        self.closed.append(fd)


def test_capture_opens_a_device_per_interface_and_decodes_records() -> None:
    api = FakeBpf()
    capture = BpfDeviceCapture.open(AgentConfig(snaplen=2048), Decoder(DirectionResolver()), api)
    assert api.opened == [("en0", 2048), ("en1", 2048)]
    assert capture.describe() == "bpf en0(dlt=1),en1(dlt=1)"
    sink = ListSink()
    assert capture.poll(sink, 0.0) == 6
    assert [p.direction for p in sink.packets] == [OUTBOUND, INBOUND] * 3
    assert {p.remote_ip for p in sink.packets} == {ip_int("8.8.8.8")}
    cut = sink.packets[-1]
    assert cut.size == len(FRAMES[-1].data) - 14  # the IP length, not what the snap length kept
    assert len(cut.payload) == 96 - 14 - 20 - 8
    capture.close()
    assert api.closed == [10, 11]


def test_unknown_interface_is_named() -> None:
    with pytest.raises(CaptureError, match="no such interface utun9"):
        BpfDeviceCapture.open(AgentConfig(interfaces=("utun9",)), Decoder(DirectionResolver()), FakeBpf())
