"""Frame decoding: link layer -> IPv4 -> TCP/UDP/ICMP -> CapturedPacket, per the contract.

The contract (proto/sensor.proto): local/remote are from this host's point of view; `size` is the
IP packet's length on the wire; the payload is the transport payload, except that OUTBOUND UDP keeps
its 8-byte UDP header and ICMP carries the whole ICMP message. Nothing here raises on bad input:
every frame that is not turned into a packet is counted under a reason in `DecodeStats`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable

from agents.model import INBOUND, OUTBOUND, CapturedPacket

# Link-layer types (LINKTYPE_* of pcap/pcapng; the same numbers macOS BIOCGDLT reports).
LINK_NULL = 0          # BSD loopback: 4-byte address family in host byte order
LINK_ETHERNET = 1
LINK_RAW = 101         # bare IP, version in the first nibble
LINK_RAW_BSD = 12      # DLT_RAW as numbered on some BSDs
LINK_LOOP = 108        # OpenBSD loopback: family in network byte order
LINK_LINUX_SLL = 113   # Linux "cooked" v1
LINK_LINUX_SLL2 = 276  # Linux "cooked" v2
LINK_IPV4 = 228
LINK_IPV6 = 229

ETH_IPV4 = 0x0800
ETH_IPV6 = 0x86DD
_VLAN_TAGS = (0x8100, 0x88A8, 0x9100)

# Linux packet types (sll_pkttype): who the frame was for.
PKT_HOST = 0
PKT_BROADCAST = 1
PKT_MULTICAST = 2
PKT_OTHERHOST = 3
PKT_OUTGOING = 4

_AF_INET_VALUES = {2}
_AF_INET6_VALUES = {10, 24, 28, 30}  # Linux, NetBSD/OpenBSD, FreeBSD, macOS

_IP_HEAD = struct.Struct("!BBHHHBBHII")
_PORTS = struct.Struct("!HH")
_U16 = struct.Struct("!H")

# Reasons a frame produced no packet.
SKIP_IPV6 = "ipv6"              # counted and skipped until the contract carries IPv6
SKIP_NON_IP = "non_ip"          # ARP, LLDP, unknown link types...
SKIP_TRUNCATED = "truncated"    # headers cut short by the capture
SKIP_MALFORMED = "malformed"    # impossible header values
SKIP_FRAGMENT = "fragment"      # non-first IPv4 fragments carry no transport header
SKIP_NOT_LOCAL = "not_local"    # neither side is this host (promiscuous or forwarded traffic)
SKIP_EXCLUDED = "excluded"      # the agent's own traffic to the appliance


class DecodeStats:
    """Counters of the decoder: packets produced and frames skipped per reason."""

    __slots__ = ("decoded", "skipped")

    def __init__(self) -> None:
        self.decoded = 0
        self.skipped: dict[str, int] = {}

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1

    def as_dict(self) -> dict[str, int]:
        return {"decoded": self.decoded, **{f"skipped_{k}": v for k, v in sorted(self.skipped.items())}}


class DirectionResolver:
    """Decides which side of a packet is this host.

    Known local addresses decide first, then `internal` networks ((network, mask) pairs: a mirror
    port has no side of its own, so the internal network's side is "local"). Otherwise a live
    capture's packet type (outgoing vs. for this host) decides. For capture files of unknown hosts
    and for traffic wholly inside or outside the internal networks (`infer=True`) the initiator of
    a conversation, the sender of its first packet, is taken as the local side.
    """

    __slots__ = ("local", "infer", "internal", "_initiators", "_max_conversations")

    def __init__(self, local_addresses: Iterable[int] = (), *, infer: bool = False,
                 max_conversations: int = 65536, internal: Iterable[tuple[int, int]] = ()) -> None:
        self.local: frozenset[int] = frozenset(local_addresses)
        self.infer = infer
        self.internal: tuple[tuple[int, int], ...] = tuple(internal)
        self._initiators: dict[tuple[int, int, int, int, int], int] = {}
        self._max_conversations = max_conversations

    def is_internal(self, address: int) -> bool:
        """True when `address` is in one of the internal networks."""
        for network, mask in self.internal:
            if address & mask == network:
                return True
        return False

    def set_local(self, addresses: Iterable[int]) -> None:
        self.local = frozenset(addresses)

    def outbound(self, src: int, dst: int, sport: int, dport: int, proto: int, pkttype: int | None) -> bool | None:
        """True when `src` is this host, False when `dst` is, None when neither can be told."""
        local = self.local
        src_local = src in local
        dst_local = dst in local
        if self.internal:
            src_local = src_local or self.is_internal(src)
            dst_local = dst_local or self.is_internal(dst)
        if src_local and not dst_local:
            return True
        if dst_local and not src_local:
            return False
        if pkttype is not None and pkttype != PKT_OTHERHOST:
            return pkttype == PKT_OUTGOING
        if src_local and not self.internal:  # both local and no packet type: the sender is the side we report
            return True
        if not self.infer:
            return None
        if (src, sport) <= (dst, dport):
            key = (proto, src, sport, dst, dport)
        else:
            key = (proto, dst, dport, src, sport)
        initiator = self._initiators.get(key)
        if initiator is None:
            if len(self._initiators) >= self._max_conversations:
                self._initiators.clear()  # bounded memory; a long replay re-learns conversations
            self._initiators[key] = src
            return True
        return initiator == src


class Decoder:
    """Turns captured frames into CapturedPackets; one instance per capture thread (not thread-safe)."""

    def __init__(self, directions: DirectionResolver, *, exclude: Iterable[tuple[int, int]] = (),
                 stats: DecodeStats | None = None) -> None:
        self.directions = directions
        # (ip, tcp port) pairs whose TCP traffic is the agent's own stream to the appliance.
        self.exclude: frozenset[tuple[int, int]] = frozenset(exclude)
        self.stats = stats or DecodeStats()
        self._links: dict[int, Callable[[bytes], tuple[int, int, int | None] | None]] = {
            LINK_ETHERNET: _ethernet,
            LINK_LINUX_SLL: _sll,
            LINK_LINUX_SLL2: _sll2,
            LINK_NULL: _null,
            LINK_LOOP: _loop,
            LINK_RAW: _raw,
            LINK_RAW_BSD: _raw,
            LINK_IPV4: _raw,
            LINK_IPV6: _raw,
        }

    def decode(self, linktype: int, frame: bytes, timestamp_ns: int) -> CapturedPacket | None:
        """Decode one frame of a capture file or device of the given link type."""
        link = self._links.get(linktype)
        if link is None:
            self.stats.skip(SKIP_NON_IP)
            return None
        found = link(frame)
        if found is None:
            self.stats.skip(SKIP_TRUNCATED)
            return None
        ethertype, offset, pkttype = found
        return self.decode_network(ethertype, frame, offset, timestamp_ns, pkttype)

    def decode_network(self, ethertype: int, buf: bytes, off: int, timestamp_ns: int,
                       pkttype: int | None = None) -> CapturedPacket | None:
        """Decode from the network header at `buf[off:]` (Linux SOCK_DGRAM and raw sockets start here)."""
        stats = self.stats
        if ethertype != ETH_IPV4:
            stats.skip(SKIP_IPV6 if ethertype == ETH_IPV6 else SKIP_NON_IP)
            return None
        captured = len(buf)
        if captured - off < 20:
            stats.skip(SKIP_TRUNCATED)
            return None
        vihl, _tos, total, _ident, frag, _ttl, proto, _csum, src, dst = _IP_HEAD.unpack_from(buf, off)
        if vihl >> 4 != 4:
            stats.skip(SKIP_IPV6 if vihl >> 4 == 6 else SKIP_MALFORMED)
            return None
        ihl = (vihl & 15) * 4
        if ihl < 20 or (total and total < ihl):
            stats.skip(SKIP_MALFORMED)
            return None
        if frag & 0x1FFF:
            stats.skip(SKIP_FRAGMENT)
            return None
        if total == 0:  # segmentation offload hands up super-frames with no length set
            total = captured - off
        end = off + total
        if end > captured:
            end = captured  # cut by the snap length: keep what was captured, report the real size
        l4 = off + ihl
        if l4 > end:
            stats.skip(SKIP_TRUNCATED)
            return None
        sport = dport = flags = 0
        if proto == 6:
            if end - l4 < 14:
                stats.skip(SKIP_TRUNCATED)
                return None
            sport, dport = _PORTS.unpack_from(buf, l4)
            doff = (buf[l4 + 12] >> 4) * 4
            if doff < 20:
                stats.skip(SKIP_MALFORMED)
                return None
            flags = buf[l4 + 13]
            start = l4 + doff if l4 + doff < end else end
        elif proto == 17:
            if end - l4 < 8:
                stats.skip(SKIP_TRUNCATED)
                return None
            sport, dport = _PORTS.unpack_from(buf, l4)
            start = l4 + 8
        else:  # ICMP and every other protocol: the whole IP payload, no ports
            start = l4
        outbound = self.directions.outbound(src, dst, sport, dport, proto, pkttype)
        if outbound is None:
            stats.skip(SKIP_NOT_LOCAL)
            return None
        ts_ms = timestamp_ns // 1_000_000
        if outbound:
            if proto == 6 and (dst, dport) in self.exclude:
                stats.skip(SKIP_EXCLUDED)
                return None
            if proto == 17:
                start = l4  # the contract: outbound UDP keeps its 8-byte header
            stats.decoded += 1
            return CapturedPacket(ts_ms, OUTBOUND, src, dst, sport, dport, proto, total, buf[start:end], flags)
        if proto == 6 and (src, sport) in self.exclude:
            stats.skip(SKIP_EXCLUDED)
            return None
        stats.decoded += 1
        return CapturedPacket(ts_ms, INBOUND, dst, src, dport, sport, proto, total, buf[start:end], flags)


# Link-layer parsers: (ethertype, network header offset, packet type or None); None when truncated.

def _ethernet(frame: bytes) -> tuple[int, int, int | None] | None:
    if len(frame) < 14:
        return None
    ethertype = _U16.unpack_from(frame, 12)[0]
    offset = 14
    while ethertype in _VLAN_TAGS:
        if len(frame) < offset + 4:
            return None
        ethertype = _U16.unpack_from(frame, offset + 2)[0]
        offset += 4
    return ethertype, offset, None


def _sll(frame: bytes) -> tuple[int, int, int | None] | None:
    if len(frame) < 16:
        return None
    return _U16.unpack_from(frame, 14)[0], 16, _U16.unpack_from(frame, 0)[0]


def _sll2(frame: bytes) -> tuple[int, int, int | None] | None:
    if len(frame) < 20:
        return None
    return _U16.unpack_from(frame, 0)[0], 20, frame[10]


def _family(value: int) -> int:
    if value in _AF_INET_VALUES:
        return ETH_IPV4
    if value in _AF_INET6_VALUES:
        return ETH_IPV6
    return 0


def _null(frame: bytes) -> tuple[int, int, int | None] | None:
    if len(frame) < 4:
        return None
    # Host byte order of the capturing machine, which a reader cannot know: try both.
    little = int.from_bytes(frame[:4], "little")
    return _family(little) or _family(int.from_bytes(frame[:4], "big")), 4, None


def _loop(frame: bytes) -> tuple[int, int, int | None] | None:
    if len(frame) < 4:
        return None
    return _family(int.from_bytes(frame[:4], "big")), 4, None


def _raw(frame: bytes) -> tuple[int, int, int | None] | None:
    if not frame:
        return None
    version = frame[0] >> 4
    return (ETH_IPV4 if version == 4 else ETH_IPV6 if version == 6 else 0), 0, None
