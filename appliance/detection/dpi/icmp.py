"""ICMP covert channels: payloads ping never sends, replies that do not echo, sustained rates.

Ping tools fill echo data with a recognisable pattern (Linux/BSD: an 8 or 16 byte timestamp then
incrementing bytes, `-p` repeats a short pattern; Windows: "abcdefghijklmnopqrstuvw"), keep one
size for the whole run, and the peer echoes the data back unchanged (RFC 792). Tunnels
(ptunnel, icmpsh, icmptunnel) carry data: high entropy or text, many sizes, replies that differ.
"""

from __future__ import annotations

from appliance.detection.analysis_config import AnalysisConfig
from appliance.detection.detections import make_detection
from appliance.detection.dpi.dga import shannon_entropy
from appliance.model import Category, Detection, FlowRecord, Severity, Transport

_ECHO_REPLY = 0
_ECHO_REQUEST = 8
_PTUNNEL_MAGIC = b"\xd5\x20\x08\x80"
_WINDOWS = b"abcdefghijklmnopqrstuvw"
_RAMP = bytes(range(256)) * 2  # [start : start + 256] is the ramp from any start


def _entropy(data: bytes) -> float:
    return shannon_entropy(data)  # bytes are symbols as they are (0.0 when empty)


def _repeated(unit: bytes, n: int) -> bytes:
    """`unit` repeated to exactly n bytes."""
    return (unit * (n // len(unit) + 1))[:n]


def _is_ramp(tail: bytes) -> bool:
    """Each byte one more than the one before, modulo 256 (compared as bytes: ping data is up to 64 KiB, and
    a Python step per byte cost ~50 ns)."""
    start = tail[0]
    return tail == _repeated(_RAMP[start : start + 256], len(tail))


def is_ping_pattern(data: bytes) -> bool:
    """True for the echo data ordinary ping tools send (data excludes identifier/sequence).
    `tests/appliance/detection/icmp_reference.py` holds the byte-at-a-time form the tests compare it to."""
    if len(data) <= 16:
        return True  # too short to carry much; ping -s 0..16 is still ping
    if data.startswith(_WINDOWS[: min(len(data), len(_WINDOWS))]):
        return data == _repeated(_WINDOWS, len(data))
    for skip in (8, 16, 0):
        tail = data[skip:]
        n = len(tail)
        if n >= 8 and tail[1] == (tail[0] + 1) & 0xFF and _is_ramp(tail):
            return True
        for period in (1, 2, 4, 8, 16):
            # `period` repeats (ping -p) exactly when the data equals itself shifted by it; the first byte
            # turns most data away without a copy.
            if n >= 2 * period and tail[period] == tail[0] and tail[period:] == tail[:-period]:
                return True
    return False


class IcmpAnalyzer:
    """Scores one ICMP flow (all echo traffic between an agent and one peer)."""

    def analyze(self, flow: FlowRecord, config: AnalysisConfig) -> list[Detection]:
        if flow.transport is not Transport.ICMP:
            return []
        c = config.icmp
        requests: dict[bytes, bytes] = {}
        replies: list[tuple[bytes, bytes]] = []
        payloads: list[bytes] = []
        for pkt in flow.samples:
            icmp = pkt.icmp
            if icmp is None or icmp.type not in (_ECHO_REQUEST, _ECHO_REPLY) or len(icmp.data) < 4:
                continue
            ident, data = icmp.data[:4], icmp.data[4:]
            payloads.append(data)
            if icmp.type == _ECHO_REQUEST:
                requests[ident] = data
            else:
                replies.append((ident, data))
        if not payloads:
            return []
        nonstandard = [p for p in payloads if not is_ping_pattern(p)]
        sizes = {len(p) for p in payloads}
        big = [p for p in payloads if len(p) > 32]
        entropy = max((_entropy(p) for p in big), default=0.0)
        oversize = max(len(p) for p in payloads) > c.max_standard_payload
        mismatched = sum(1 for ident, data in replies if ident in requests and requests[ident] != data)
        ptunnel = any(_PTUNNEL_MAGIC in p[:32] for p in payloads)
        duration = max(flow.duration_s, 1e-3)
        pps = (flow.packets_out + flow.packets_in) / duration
        sustained = duration >= c.sustained_min_s and pps >= c.sustained_pps
        evidence = {"echo_payloads": len(payloads), "nonstandard_payloads": len(nonstandard), "sizes": sorted(sizes)[:10],
                    "max_entropy": round(entropy, 2), "mismatched_replies": mismatched, "ptunnel_magic": ptunnel,
                    "packets_out": flow.packets_out, "packets_in": flow.packets_in, "bytes_out": flow.bytes_out,
                    "bytes_in": flow.bytes_in, "packets_per_s": round(pps, 1), "oversize": oversize}
        address = flow.remote_addr
        common = dict(agent_id=flow.agent_id, indicator=address, protocol="icmp", transport="icmp",
                      flow_ids=[flow.flow_id], first_ns=flow.first_ns, last_ns=flow.last_ns, remote_ip=address)
        out: list[Detection] = []
        share = len(nonstandard) / len(payloads)
        if share >= 0.5 and (entropy >= c.entropy_threshold or len(sizes) > 2 or ptunnel or oversize or len(nonstandard) >= 3):
            confidence = 0.45 + 0.2 * (entropy >= c.entropy_threshold) + 0.1 * (len(sizes) > 2) + 0.15 * ptunnel + 0.1 * oversize
            reason = f"{len(nonstandard)} of {len(payloads)} echo payloads are not ping patterns (entropy up to {entropy:.1f} bits/byte)"
            out.append(make_detection("dpi.icmp.payload", Category.ICMP_COVERT_CHANNEL, confidence, Severity.HIGH,
                                      evidence={**evidence, "reason": reason}, **common))  # type: ignore[arg-type]
        if mismatched or (sustained and nonstandard):
            confidence = 0.5 + 0.3 * (mismatched >= 2) + 0.15 * sustained
            reason = (f"{mismatched} echo replies carry different data than their requests" if mismatched
                      else f"sustained {pps:.0f} packets/s of non-ping ICMP")
            out.append(make_detection("dpi.icmp.asymmetry", Category.ICMP_COVERT_CHANNEL, confidence, Severity.HIGH,
                                      evidence={**evidence, "reason": reason}, **common))  # type: ignore[arg-type]
        return out
