"""Capture files: classic pcap in both byte orders and resolutions, pcapng with its block kinds."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.errors import CaptureFileError
from agents.pcapfile import read_capture
from tests.agents.conftest import PCAPS
from tests.agents.frames import pcap_bytes, pcapng_bytes

REAL = PCAPS / "tls-c2-clienthello.pcap"


def real_frames() -> list[tuple[int, bytes]]:
    return [(f.timestamp_ns, f.data) for f in read_capture(REAL)]


def test_real_classic_pcap_has_microsecond_timestamps_and_ethernet() -> None:
    frames = list(read_capture(REAL))
    assert len(frames) == 9
    assert {f.linktype for f in frames} == {1}
    assert all(f.timestamp_ns % 1000 == 0 for f in frames)
    assert frames[0].timestamp_ns < frames[-1].timestamp_ns
    assert all(len(f.data) == f.original_length for f in frames)


@pytest.mark.parametrize("big_endian", [False, True])
@pytest.mark.parametrize("nanos", [False, True])
def test_classic_pcap_byte_orders_and_resolutions(tmp_path: Path, big_endian: bool, nanos: bool) -> None:
    frames = [(1_600_000_000_123_456_789, b"a" * 20), (1_600_000_001_000_000_001, b"b" * 30)]
    path = tmp_path / "x.pcap"
    path.write_bytes(pcap_bytes(frames, 101, big_endian=big_endian, nanos=nanos))
    got = list(read_capture(path))
    expect = [ts if nanos else ts // 1000 * 1000 for ts, _ in frames]
    assert [f.timestamp_ns for f in got] == expect
    assert [f.data for f in got] == [d for _, d in frames]
    assert {f.linktype for f in got} == {101}


@pytest.mark.parametrize("big_endian", [False, True])
def test_pcapng_enhanced_blocks_carry_the_real_frames(tmp_path: Path, big_endian: bool) -> None:
    frames = real_frames()
    path = tmp_path / "x.pcapng"
    path.write_bytes(pcapng_bytes(frames, big_endian=big_endian))
    assert [(f.timestamp_ns, f.data) for f in read_capture(path)] == frames


def test_pcapng_nanosecond_resolution_option(tmp_path: Path) -> None:
    frames = [(1_600_000_000_123_456_789, b"x" * 40)]
    path = tmp_path / "ns.pcapng"
    path.write_bytes(pcapng_bytes(frames, 101, tsresol=9))
    assert [f.timestamp_ns for f in read_capture(path)] == [1_600_000_000_123_456_789]


def test_pcapng_simple_blocks_have_no_timestamp(tmp_path: Path) -> None:
    path = tmp_path / "spb.pcapng"
    path.write_bytes(pcapng_bytes(real_frames(), simple=True))
    got = list(read_capture(path))
    assert [f.data for f in got] == [d for _, d in real_frames()]
    assert {f.timestamp_ns for f in got} == {0}


def test_a_capture_cut_short_ends_quietly(tmp_path: Path) -> None:
    data = REAL.read_bytes()
    path = tmp_path / "cut.pcap"
    path.write_bytes(data[:-10])
    assert len(list(read_capture(path))) == 8


def test_garbage_and_corrupt_lengths_name_the_file_and_offset(tmp_path: Path) -> None:
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"GIF89a....")
    with pytest.raises(CaptureFileError, match="junk.bin: not a pcap"):
        list(read_capture(junk))
    corrupt = tmp_path / "corrupt.pcapng"
    data = bytearray(pcapng_bytes(real_frames()))
    data[28 + 4 : 28 + 8] = (7).to_bytes(4, "little")  # the IDB claims a length that is not a multiple of 4
    corrupt.write_bytes(bytes(data))
    with pytest.raises(CaptureFileError, match="offset 28"):
        list(read_capture(corrupt))
    with pytest.raises(CaptureFileError, match="cannot open"):
        list(read_capture(tmp_path / "missing.pcap"))
