"""The Linux socket filter, run by a small classic-BPF interpreter over real frames."""

from __future__ import annotations

import struct

from agents.capture.bpf import SKF_AD_IFINDEX, SKF_AD_OFF, SKF_AD_PROTOCOL, agent_filter, pack
from agents.model import ip_int
from agents.pcapfile import read_capture
from tests.agents.conftest import PCAPS
from tests.agents.frames import ipv4, tcp, udp


def run_filter(program: list[tuple[int, int, int, int]], packet: bytes, ethertype: int, ifindex: int) -> int:
    """What the kernel would return for a SOCK_DGRAM packet: bytes to keep (0 drops)."""
    a = x = 0
    pc = 0

    def load(offset: int, size: int) -> int | None:
        if offset >= 2**31:  # ancillary (negative) offsets
            ancillary = offset - 2**32 - SKF_AD_OFF
            return {SKF_AD_PROTOCOL: ethertype, SKF_AD_IFINDEX: ifindex}[ancillary]
        if offset + size > len(packet):
            return None
        return int.from_bytes(packet[offset : offset + size], "big")

    while True:
        code, jt, jf, k = program[pc]
        pc += 1
        cls, size, mode = code & 0x07, code & 0x18, code & 0xE0
        if cls == 0x06:
            return k
        if cls == 0x00:
            nbytes = {0x00: 4, 0x08: 2, 0x10: 1}[size]
            value = load(k if mode == 0x20 else x + k, nbytes)
            if value is None:
                return 0  # out-of-bounds loads drop the packet, as in the kernel
            a = value
        elif cls == 0x01:  # ldxb 4*([k]&0xf)
            value = load(k, 1)
            if value is None:
                return 0
            x = (value & 0x0F) * 4
        elif cls == 0x05:
            op = code & 0xF0
            hit = a == k if op == 0x10 else bool(a & k)
            pc += jt if hit else jf
        else:
            raise AssertionError(f"unexpected opcode {code:#x}")


APPLIANCE = ("10.99.0.1", 50051)
PROGRAM = agent_filter(2048, [(ip_int(APPLIANCE[0]), APPLIANCE[1])], skip_ifindex=1)


def test_program_packs_into_sock_filter_structs() -> None:
    assert len(pack(PROGRAM)) == 8 * len(PROGRAM)
    assert struct.unpack_from("HBBI", pack(PROGRAM))[0] == PROGRAM[0][0]


def test_real_ipv4_frames_are_kept_up_to_the_snap_length() -> None:
    for frame in read_capture(PCAPS / "icmp-ping-and-ssh-benign.pcap"):
        assert run_filter(PROGRAM, frame.data[14:], 0x0800, ifindex=2) == 2048


def test_own_stream_is_dropped_in_both_directions_but_other_tcp_kept() -> None:
    out = ipv4("10.99.0.2", APPLIANCE[0], 6, tcp(41000, APPLIANCE[1], b"grpc"))
    back = ipv4(APPLIANCE[0], "10.99.0.2", 6, tcp(APPLIANCE[1], 41000, b"grpc"))
    other_port = ipv4("10.99.0.2", APPLIANCE[0], 6, tcp(41000, 443, b"tls"))
    same_port_udp = ipv4("10.99.0.2", APPLIANCE[0], 17, udp(41000, APPLIANCE[1], b"dns?"))
    assert run_filter(PROGRAM, out, 0x0800, 2) == 0
    assert run_filter(PROGRAM, back, 0x0800, 2) == 0
    assert run_filter(PROGRAM, other_port, 0x0800, 2) == 2048
    assert run_filter(PROGRAM, same_port_udp, 0x0800, 2) == 2048


def test_loopback_other_protocols_and_ipv6() -> None:
    packet = ipv4("10.0.0.1", "10.0.0.2", 17, udp(1, 2, b"x"))
    assert run_filter(PROGRAM, packet, 0x0800, ifindex=1) == 0      # loopback, dropped in the kernel
    assert run_filter(PROGRAM, b"\0" * 28, 0x0806, ifindex=2) == 0  # ARP
    assert run_filter(PROGRAM, b"\x60" + b"\0" * 39, 0x86DD, ifindex=2) == 1  # kept 1 byte: counted


def test_without_exclusions_every_ipv4_packet_is_kept() -> None:
    program = agent_filter(512, [], skip_ifindex=None)
    assert run_filter(program, ipv4("1.1.1.1", "2.2.2.2", 6, tcp(1, 2, b"")), 0x0800, 1) == 512
