"""TLS handshake metadata through the real gRPC path: JA4 of real clients, known-bad fingerprints, counters."""

from __future__ import annotations

import datetime

import pytest

from appliance.detection.dpi.tls_lists import fingerprint_lists
from tests.agents.netns import lab_available
from tests.appliance.detection import scenarios as sc
from tests.appliance.detection import tls_certs as tc
from tests.appliance.detection import tls_records as tr
from tests.appliance.detection.conftest import alerts_of, recorded_detections
from tests.appliance.detection.tls_capture import capture_client_hello

SERVER = "185.220.101.47"


def _flows(running, machine_id: str) -> list[dict]:
    assert running.app.pipeline.drain()
    status, body = running.rest.get("/api/v1/flows?limit=1000&state=finished")
    assert status == 200, body
    return [f for f in body["flows"] if f["remote_port"] in (443, 8443)]


@pytest.mark.slow
@pytest.mark.parametrize("client", ["curl", "python"])
def test_a_real_client_hello_gets_the_reference_ja4(detecting, tmp_path, client):
    reason = lab_available()
    if reason:
        pytest.skip(reason)
    from ja4plus import generate_ja4
    from ja4plus.utils.tls_utils import parse_tls_handshake

    hello = capture_client_hello(tmp_path, client)
    expected = generate_ja4(parse_tls_handshake(hello))
    assert expected and expected.startswith("t13d")  # both clients offer TLS 1.3 and send SNI
    stream = sc.Stream(f"{client}-host", "10.0.1.70")
    stream.dns(sc.T0_MS, "files.example-exfil.net", answers=[SERVER])
    stream.tcp(sc.T0_MS + 50, SERVER, 443, hello, 3000, 9000, reply=tr.server_hello(0x1302, [0x002B, 0x0033], selected=0x0304))
    assert sc.stream(detecting.stub(), stream) == len(stream.packets)
    (flow,) = _flows(detecting, stream.machine_id)
    assert flow["tls"]["ja4"] == expected
    assert flow["tls"]["sni"] == "files.example-exfil.net"
    assert flow["tls"]["ja4s"].startswith("t130200_1302_") and flow["tls"]["complete"]
    metrics = detecting.rest.get("/api/v1/metrics")[1]
    assert metrics["tls_handshakes"] == 1 and metrics["tls_handshakes_incomplete"] == 0




def test_a_listed_server_fingerprint_and_a_raw_address_raise_one_alert(detecting):
    listed = fingerprint_lists()["known_bad_ja4s"]
    # IcedID's C2 as the mapping records it: TLS 1.2, ECDHE-RSA-AES256-GCM-SHA384, three extensions in this order.
    reply = tr.server_hello(0xC030, [0xFF01, 0x0023, 0x0017])
    stream = sc.Stream("implant-host", "10.0.1.71")
    hello = tr.client_hello([0xC030, 0xC02F], [0x0000, 0x000A, 0x000B], sni="", groups=[0x0017], point_formats=[0])
    for i in range(2):
        stream.tcp(sc.T0_MS + i * 40_000, SERVER, 443, hello, 2000, 4000, reply=reply)
    sc.stream(detecting.stub(), stream)
    (alert,) = alerts_of(detecting)
    detectors = {d["detector"] for d in alert["detections"]}
    assert "signature:SIG-TLS-005" in detectors and "dpi.tls.raw_ip" in detectors
    matched = next(d for d in alert["detections"] if d["detector"] == "signature:SIG-TLS-005")["evidence"]["matched"]
    assert matched["tls.ja4s"] == "t120300_c030_5e2616a54c73" and listed[matched["tls.ja4s"]].tool == "IcedID C2 server"


def test_a_generic_tls13_answer_is_not_on_the_list(detecting):
    """Sliver's published JA4S is what any TLS 1.3 server choosing AES-128-GCM sends: left out of the list."""
    stream = sc.Stream("browser-host", "10.0.1.77")
    stream.dns(sc.T0_MS, "www.example.com", answers=["93.184.216.34"])
    stream.tcp(sc.T0_MS + 40, "93.184.216.34", 443, tr.client_hello([0x1301], [0x0000, 0x002B], sni="www.example.com",
               versions=[0x0304]), 2000, 4000, reply=tr.server_hello(0x1301, [0x002B, 0x0033], selected=0x0304))
    seen = recorded_detections(detecting)
    sc.stream(detecting.stub(), stream)
    assert detecting.app.pipeline.drain()
    (flow,) = [f for f in _flows(detecting, stream.machine_id) if f["remote_ip"] == "93.184.216.34"]
    assert flow["tls"]["ja4s"] == "t130200_1301_a56c5b993250"
    assert seen == [] and alerts_of(detecting) == []


def test_hellos_cut_or_garbled_are_counted_and_the_flow_still_analysed(detecting):
    stream = sc.Stream("odd-host", "10.0.1.72")
    full = tr.client_hello(list(range(1, 20)), [0x0000, 0x000D, 0x002B], sni="a.example.org", sig_algs=[0x0403],
                           versions=[0x0304])
    stream.tcp(sc.T0_MS, SERVER, 443, full[:-3], 2000, 4000)  # cut inside the last extension, after the SNI
    stream.tcp(sc.T0_MS + 1000, SERVER, 443, b"\x16\x03\x01\x00\x10" + b"\xff" * 16, 2000, 4000)  # not a hello
    sc.stream(detecting.stub(), stream)
    assert detecting.app.pipeline.drain()
    metrics = detecting.rest.get("/api/v1/metrics")[1]
    assert metrics["flows_processed"] == 2 and metrics["analysis_errors"] == 0
    assert metrics["tls_handshakes"] == 1 and metrics["tls_handshakes_incomplete"] == 1
    assert metrics["tls_handshakes_unreadable"] == 1
    flows = {f["tls"]["sni"] if f["tls"] else None for f in _flows(detecting, stream.machine_id)}
    assert flows == {"a.example.org", None}


def _learned(stream: sc.Stream, minutes: int = 65) -> int:
    """The agent's everyday TLS (one client fingerprint) over `minutes` of event time: the rare-fingerprint
    signal learns an agent for an hour and 20 handshakes first. Returns the time after it."""
    t = sc.T0_MS
    for i in range(minutes // 2):
        name = f"www.site{i % 7}.example.com"
        address = stream.dns(t, name)[0]
        stream.tls(t + 40, address, name)
        t += 120_000
    return t


def test_a_self_signed_certificate_to_a_public_address_is_a_detection_and_with_a_second_signal_an_alert(detecting):
    seen = recorded_detections(detecting)
    stream = sc.Stream("laptop-07", "10.0.1.73")
    t = _learned(stream)
    issued = datetime.datetime.fromtimestamp(sc.T0_MS / 1000, datetime.UTC) - 20 * tc.DAY
    selfie = tc.issue("files.example-exfil.net", dns=["files.example-exfil.net"], not_before=issued, days=365)
    flight = tr.server_flight(0xC02F, [0xFF01, 0x0000], [selfie.der])
    stream.dns(t, "files.example-exfil.net", answers=[SERVER])  # resolved: not a raw-address connection
    stream.tcp(t + 50, SERVER, 443, sc.client_hello("files.example-exfil.net"), 3000, 9000, reply=flight)
    sc.stream(detecting.stub(), stream)
    assert alerts_of(detecting) == []  # one signal is a detection, not an alert
    (detection,) = [d for d in seen if d.indicator == SERVER]
    assert detection.detector == "dpi.tls.cert_self_signed" and detection.indicator == SERVER
    assert detection.evidence["subject"] == "CN=files.example-exfil.net" and detection.evidence["sha256"]
    (flow,) = [f for f in _flows(detecting, stream.machine_id) if f["remote_ip"] == SERVER]
    assert flow["tls"]["certificate"]["self_signed"] and flow["tls"]["chain_length"] == 1

    # The second signal: a minute later a client this laptop (and the fleet) never used connects there.
    tool = sc.Stream("laptop-07", "10.0.1.73")
    tool.tcp(t + 60_000, SERVER, 443, tr.client_hello([0x1301, 0x1302, 0xC02F], [0x0000, 0x000A, 0x000D, 0x002B],
             sni="files.example-exfil.net", groups=[0x001D], sig_algs=[0x0804], versions=[0x0304, 0x0303]),
             3000, 9000, reply=flight)
    sc.stream(detecting.stub(), tool)
    (alert,) = alerts_of(detecting)
    assert alert["indicator"] == SERVER
    detectors = {d["detector"] for d in alert["detections"]}
    assert detectors == {"dpi.tls.cert_self_signed", "dpi.tls.rare_fingerprint"}
    rare = next(d for d in alert["detections"] if d["detector"] == "dpi.tls.rare_fingerprint")["evidence"]
    assert rare["fleet_agents"] == 0 and rare["agent_handshakes"] >= 20 and rare["ja4"].startswith("t13d0304")


def test_a_fingerprint_the_fleet_already_uses_is_not_rare_and_learning_agents_are_quiet(detecting):
    seen = recorded_detections(detecting)
    veteran, colleague, fresh = (sc.Stream("desk-01", "10.0.1.74"), sc.Stream("desk-02", "10.0.1.75"),
                                 sc.Stream("desk-03", "10.0.1.76"))
    t = _learned(veteran)
    _learned(colleague)
    hello = tr.client_hello([0x1301, 0xC02B], [0x0000, 0x002B], sni="app.example.org", versions=[0x0304])
    for stream, at in ((veteran, t), (colleague, t + 60_000)):
        stream.dns(at, "app.example.org", answers=["93.184.216.34"])
        stream.tcp(at + 40, "93.184.216.34", 443, hello, 2000, 4000)
    other = tr.client_hello([0x1301, 0x1303], [0x0000, 0x002B], sni="app.example.org", versions=[0x0304])
    fresh.dns(sc.T0_MS, "app.example.org", answers=["93.184.216.34"])
    fresh.tcp(sc.T0_MS + 40, "93.184.216.34", 443, other, 2000, 4000)  # never seen anywhere, but desk-03 is new
    for stream in (veteran, colleague, fresh):
        sc.stream(detecting.stub(), stream)
    assert detecting.app.pipeline.drain()
    rare = [d for d in seen if d.detector == "dpi.tls.rare_fingerprint"]
    assert len(rare) == 1  # desk-01's: new to it and to the fleet; desk-02 follows a fleet fingerprint
    assert rare[0].evidence["fleet_agents"] == 0 and rare[0].evidence["sni"] == "app.example.org"
    assert rare[0].evidence["agent_watched_s"] >= 3600 and rare[0].first_ns >= (t + 40) * 1_000_000
    assert alerts_of(detecting) == []


def test_hostile_certificate_flights_are_counted_and_never_stop_analysis(detecting):
    hello = tr.client_hello([0xC02F], [0x0000], sni="files.example-exfil.net")
    server = tr.server_hello(0xC02F, [0xFF01])
    garbage = server + tr.record(11, (3 * 3).to_bytes(3, "big") + b"\x00\x00\x06" + b"\x30\x82\xff\xff\x00\x00")
    huge = server + b"\x16\x03\x03\x00\x07" + b"\x0b\xff\xff\xff\xff\xff\xff"  # a 16 MB chain announced
    many = server + tr.record(11, (1000 * 4).to_bytes(3, "big") + b"\x00\x00\x01\x30" * 1000)
    stream = sc.Stream("odd-server-host", "10.0.1.78")
    stream.dns(sc.T0_MS, "files.example-exfil.net", answers=[SERVER])
    for i, flight in enumerate((garbage, huge, many)):
        stream.tcp(sc.T0_MS + 100 + i * 1000, SERVER, 443, hello, 2000, 4000, reply=flight)
    assert sc.stream(detecting.stub(), stream) == len(stream.packets)
    assert detecting.app.pipeline.drain()
    metrics = detecting.rest.get("/api/v1/metrics")[1]
    assert metrics["flows_processed"] >= 3 and metrics["analysis_errors"] == 0
    assert metrics["tls_certificates_unreadable"] == 1 + 8  # the garbage one, and the first 8 of the thousand
    # The 16 MB chain, and the thousand entries (4 KB) cut by the 2 KB sample, are both incomplete.
    assert metrics["tls_handshakes"] == 3 and metrics["tls_handshakes_incomplete"] == 2
    flows = [f for f in _flows(detecting, stream.machine_id) if f["remote_ip"] == SERVER]
    assert len(flows) == 3 and all(f["tls"]["certificate"] is None and f["tls"]["ja4"] for f in flows)
    assert detecting.rest.get("/api/status")[0] == 200  # still serving


def test_the_flow_view_reads_a_flow_not_yet_analysed_from_its_samples():
    from appliance.model import FlowRecord, Packet, Transport
    from appliance.rest.routes_core import flow_view

    hello = tr.client_hello([0x1301], [0x0000, 0x002B], sni="queued.example.org", versions=[0x0304])
    flow = FlowRecord("f1", "agent", 6, Transport.TCP, 1, 40000, 2, 443, 0, 1)
    flow.samples = [Packet(0, 1, 6, Transport.TCP, 1, 2, 40000, 443, len(hello) + 52, hello)]
    view = flow_view(flow, "active")["tls"]
    assert view["sni"] == "queued.example.org" and view["ja4"].startswith("t13d0102") and view["certificate"] is None
    flow.samples = [Packet(0, 1, 6, Transport.TCP, 1, 2, 40000, 443, 100, b"GET / HTTP/1.1\r\n\r\n")]
    assert flow_view(flow, "active")["tls"] is None


def test_the_tls_view_goes_on_the_record_only_where_the_rest_api_reads_that_record():
    """Thread mode: the REST flow view reads flow.tls; the analysis process analyses copies, so it skips the view."""
    import random

    from appliance.detection.facts import FlowFacts
    from appliance.model import FlowRecord, Packet, Transport
    from tests.appliance.detection.test_tls_benign import chrome

    def flow() -> FlowRecord:
        hello = chrome("www.example.com", random.Random(1))
        record = FlowRecord("f1", "agent", 6, Transport.TCP, 1, 40000, 2, 443, 0, 1)
        record.samples = [Packet(0, 1, 6, Transport.TCP, 1, 2, 40000, 443, len(hello) + 52, hello)]
        return record

    with_views, without = flow(), flow()
    assert FlowFacts().facts(with_views).tls.sni == "www.example.com"
    assert with_views.tls is not None and with_views.tls["sni"] == "www.example.com"
    assert FlowFacts(tls_views=False).facts(without).tls.sni == "www.example.com"  # read all the same
    assert without.tls is None
