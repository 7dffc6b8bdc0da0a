"""Direction on a mirror port: the side inside `internal` networks is local; otherwise the initiator."""

from __future__ import annotations

import ipaddress

from agents.decode import PKT_OTHERHOST, Decoder, DirectionResolver
from agents.model import INBOUND, OUTBOUND, ip_int
from tests.agents.frames import ipv4, udp

ETH_IPV4 = 0x0800


def mirror_decoder() -> Decoder:
    nets = [ipaddress.IPv4Network(n) for n in ("10.0.0.0/8", "192.168.0.0/16")]
    return Decoder(DirectionResolver(infer=True, internal=[(int(n.network_address), int(n.netmask)) for n in nets]))


def test_the_internal_side_is_local_whichever_way_the_packet_goes() -> None:
    decoder = mirror_decoder()
    out = decoder.decode_network(ETH_IPV4, ipv4("10.1.2.3", "203.0.113.9", 17, udp(5353, 53, b"q")), 0, 0, PKT_OTHERHOST)
    back = decoder.decode_network(ETH_IPV4, ipv4("203.0.113.9", "10.1.2.3", 17, udp(53, 5353, b"a")), 0, 0, PKT_OTHERHOST)
    assert out is not None and back is not None
    assert (out.direction, out.local_ip, out.remote_ip) == (OUTBOUND, ip_int("10.1.2.3"), ip_int("203.0.113.9"))
    assert (back.direction, back.local_ip, back.remote_ip) == (INBOUND, ip_int("10.1.2.3"), ip_int("203.0.113.9"))


def test_traffic_wholly_inside_or_outside_takes_the_initiator_as_local() -> None:
    decoder = mirror_decoder()
    for a, b in (("10.0.0.5", "192.168.1.7"), ("198.51.100.1", "203.0.113.2")):
        first = decoder.decode_network(ETH_IPV4, ipv4(b, a, 17, udp(4000, 80, b"x")), 0, 0, PKT_OTHERHOST)
        reply = decoder.decode_network(ETH_IPV4, ipv4(a, b, 17, udp(80, 4000, b"y")), 0, 0, PKT_OTHERHOST)
        assert first is not None and reply is not None
        assert first.direction == OUTBOUND and first.local_ip == ip_int(b)
        assert reply.direction == INBOUND and reply.local_ip == ip_int(b)


def test_without_internal_networks_foreign_traffic_is_still_skipped_on_a_host_capture() -> None:
    decoder = Decoder(DirectionResolver([ip_int("10.9.9.9")]))
    frame = ipv4("10.1.2.3", "203.0.113.9", 17, udp(5353, 53, b"q"))
    assert decoder.decode_network(ETH_IPV4, frame, 0, 0, PKT_OTHERHOST) is None
    assert decoder.stats.skipped == {"not_local": 1}
