"""A tiny classic-BPF assembler and the agent's Linux socket filter.

The filter runs in the kernel on a SOCK_DGRAM packet socket, so offsets start at the network header
and the ethertype and interface index come from the ancillary loads. It keeps IPv4 (truncated to the
snap length), keeps 1 byte of IPv6 (so it can be counted and skipped), drops everything else, the
loopback interface when asked, and the agent's own TCP stream to the appliance.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

# Instruction classes, sizes, modes and jump kinds from linux/filter.h.
LD, LDX, JMP, RET = 0x00, 0x01, 0x05, 0x06
W, H, B = 0x00, 0x08, 0x10
ABS, IND, MSH = 0x20, 0x40, 0xA0
JEQ, JSET = 0x10, 0x40
K = 0x00
SKF_AD_OFF = -0x1000
SKF_AD_PROTOCOL = 0
SKF_AD_IFINDEX = 8


@dataclass(slots=True)
class Insn:
    code: int
    k: int = 0
    jt: str | int = 0
    jf: str | int = 0
    label: str = ""


def ancillary(offset: int) -> int:
    return (SKF_AD_OFF + offset) & 0xFFFFFFFF


def assemble(program: list[Insn]) -> list[tuple[int, int, int, int]]:
    """(code, jt, jf, k) tuples with label jumps resolved to relative offsets."""
    where = {insn.label: i for i, insn in enumerate(program) if insn.label}
    out = []
    for i, insn in enumerate(program):
        offsets = []
        for target in (insn.jt, insn.jf):
            if isinstance(target, str):
                delta = where[target] - i - 1
                if not 0 <= delta <= 255:
                    raise ValueError(f"jump from {i} to {target} out of range")
                offsets.append(delta)
            else:
                offsets.append(target)
        out.append((insn.code, offsets[0], offsets[1], insn.k & 0xFFFFFFFF))
    return out


def agent_filter(snaplen: int, exclude: list[tuple[int, int]], skip_ifindex: int | None) -> list[tuple[int, int, int, int]]:
    """The agent's filter program (see the module docstring)."""
    prog: list[Insn] = []
    if skip_ifindex is not None:
        prog += [Insn(LD | W | ABS, ancillary(SKF_AD_IFINDEX)),
                 Insn(JMP | JEQ | K, skip_ifindex, "drop", 0)]
    prog += [
        Insn(LD | H | ABS, ancillary(SKF_AD_PROTOCOL)),
        Insn(JMP | JEQ | K, 0x0800, "ipv4", 0),
        Insn(JMP | JEQ | K, 0x86DD, "ipv6", "drop"),
        Insn(LD | B | ABS, 9, label="ipv4"),
    ]
    if exclude:
        prog += [
            Insn(JMP | JEQ | K, 6, 0, "accept"),
            Insn(LD | H | ABS, 6),
            Insn(JMP | JSET | K, 0x1FFF, "accept", 0),  # later fragments carry no ports
            Insn(LDX | B | MSH, 0),                     # X = IP header length
        ]
        for n, (ip, port) in enumerate(exclude):
            nxt = f"pair{n + 1}" if n + 1 < len(exclude) else "accept"
            prog += [
                Insn(LD | W | ABS, 12, label=f"pair{n}" if n else ""),
                Insn(JMP | JEQ | K, ip, 0, f"dst{n}"),
                Insn(LD | H | IND, 0),
                Insn(JMP | JEQ | K, port, "drop", f"dst{n}"),
                Insn(LD | W | ABS, 16, label=f"dst{n}"),
                Insn(JMP | JEQ | K, ip, 0, nxt),
                Insn(LD | H | IND, 2),
                Insn(JMP | JEQ | K, port, "drop", nxt),
            ]
    prog += [
        Insn(RET | K, snaplen, label="accept"),
        Insn(RET | K, 1, label="ipv6"),
        Insn(RET | K, 0, label="drop"),
    ]
    return assemble(prog)


def pack(program: list[tuple[int, int, int, int]]) -> bytes:
    """The sock_filter array as the kernel reads it."""
    return b"".join(struct.pack("HBBI", code, jt, jf, k) for code, jt, jf, k in program)
