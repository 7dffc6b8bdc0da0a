"""Real third-party captures (suricata-verify) streamed through the real gRPC path."""

from __future__ import annotations

from tests.appliance.detection import scenarios as sc
from tests.appliance.detection.conftest import alerts_of
from tests.appliance.detection.pcap import FIXTURES, to_packets


def _stream(running, name: str, host: str, machine: str) -> int:
    packets = to_packets(FIXTURES / name, host)
    assert packets
    return sc.stream(running.stub(), sc.Stream(machine, host), packets)


def test_real_base64_txt_tunnel_is_dns_tunneling(detecting):
    _stream(detecting, "dns-tunnel-txt-base64.pcap", "10.30.28.90", "pcap-tunnel")
    (alert,) = alerts_of(detecting)
    assert alert["category"] == "DnsTunneling"
    assert alert["indicator"] == "tunnel.com"  # the registered domain, not the last two labels of srv.tunnel.com
    detectors = {d["detector"] for d in alert["detections"]}
    assert "dpi.dns.tunnel_names" in detectors and any(d.startswith("signature:") for d in detectors)


def test_real_c2_clienthello_to_unresolved_address_is_raw_ip_tls(detecting):
    _stream(detecting, "tls-c2-clienthello.pcap", "192.168.46.2", "pcap-tls")
    (alert,) = alerts_of(detecting)
    assert alert["category"] == "RawIpTls" and alert["indicator"] == "91.254.215.167"
    evidence = next(d["evidence"] for d in alert["detections"] if d["detector"] == "dpi.tls.raw_ip")
    assert evidence["client_hello"] is True and evidence["tls_version"] == "TLSv1.0" and evidence["sni"] == ""


def test_sofacy_lookups_are_two_isolated_signals_not_an_alert(detecting):
    # Two lookups of word-like names, one NXDOMAIN: an analyst would want threat intelligence, not a
    # DGA verdict; the names score as dictionary-like and no alert is raised.
    _stream(detecting, "dns-sofacy-c2-lookups.pcap", "192.168.35.10", "pcap-sofacy")
    assert alerts_of(detecting) == []
    scorer = detecting.app.detection.dpi.dns._scorer
    assert scorer.score("softupdates") < 0.5


def test_benign_captures_raise_nothing(detecting):
    _stream(detecting, "dns-benign-a-aaaa-mx.pcap", "10.16.1.11", "pcap-dns")
    _stream(detecting, "icmp-ping-benign.pcap", "192.168.1.6", "pcap-ping")
    _stream(detecting, "icmp-ping-and-ssh-benign.pcap", "192.168.0.30", "pcap-ping-ssh")
    assert alerts_of(detecting) == []
    status, metrics = detecting.rest.get("/api/v1/metrics")
    assert metrics["detections_generated"] == 0


def test_ordinary_ping_and_large_ping_raise_nothing(detecting):
    stream = sc.Stream("pinger", "10.0.1.50")
    stream.ping(sc.T0_MS, "8.8.8.8", count=60)
    stream.ping(sc.T0_MS + 120_000, "1.1.1.1", count=60, size=1400)
    sc.stream(detecting.stub(), stream)
    assert alerts_of(detecting) == []
    assert detecting.rest.get("/api/v1/metrics")[1]["detections_generated"] == 0
