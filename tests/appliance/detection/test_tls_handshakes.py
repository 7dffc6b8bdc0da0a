"""TLS handshake metadata through the real gRPC path: JA4 of real clients, known-bad fingerprints, counters."""

from __future__ import annotations

import pytest

from appliance.detection.dpi.tls_lists import fingerprint_lists
from tests.agents.netns import lab_available
from tests.appliance.detection import scenarios as sc
from tests.appliance.detection import tls_records as tr
from tests.appliance.detection.conftest import alerts_of
from tests.appliance.detection.tls_capture import capture_client_hello

SERVER = "185.220.101.47"


def _flows(running, machine_id: str) -> list[dict]:
    running.app.pipeline.drain()
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




def test_a_listed_fingerprint_and_a_raw_address_raise_one_alert(detecting):
    from appliance.detection.dpi.tls_fingerprint import ja4
    from appliance.detection.dpi.tls_parse import parse_client_hello

    listed = fingerprint_lists()["known_bad_ja4s"]
    reply = tr.server_hello(0x1301, [0x002B, 0x0033], selected=0x0304)
    stream = sc.Stream("implant-host", "10.0.1.71")
    for i in range(2):
        stream.tcp(sc.T0_MS + i * 40_000, SERVER, 443, tr.client_hello([0x1301, 0x1302], [0x0000, 0x002B], sni="",
                                                                         versions=[0x0304]), 2000, 4000, reply=reply)
    sc.stream(detecting.stub(), stream)
    assert ja4(parse_client_hello(tr.client_hello([0x1301], [0x002B], versions=[0x0304]))).startswith("t13i")
    (alert,) = alerts_of(detecting)
    detectors = {d["detector"] for d in alert["detections"]}
    assert "signature:SIG-TLS-005" in detectors and "dpi.tls.raw_ip" in detectors
    matched = next(d for d in alert["detections"] if d["detector"] == "signature:SIG-TLS-005")["evidence"]["matched"]
    assert matched["tls.ja4s"] in listed


def test_hellos_cut_or_garbled_are_counted_and_the_flow_still_analysed(detecting):
    stream = sc.Stream("odd-host", "10.0.1.72")
    full = tr.client_hello(list(range(1, 20)), [0x0000, 0x000D, 0x002B], sni="a.example.org", sig_algs=[0x0403],
                           versions=[0x0304])
    stream.tcp(sc.T0_MS, SERVER, 443, full[:-3], 2000, 4000)  # cut inside the last extension, after the SNI
    stream.tcp(sc.T0_MS + 1000, SERVER, 443, b"\x16\x03\x01\x00\x10" + b"\xff" * 16, 2000, 4000)  # not a hello
    sc.stream(detecting.stub(), stream)
    detecting.app.pipeline.drain()
    metrics = detecting.rest.get("/api/v1/metrics")[1]
    assert metrics["flows_processed"] == 2 and metrics["analysis_errors"] == 0
    assert metrics["tls_handshakes"] == 1 and metrics["tls_handshakes_incomplete"] == 1
    assert metrics["tls_handshakes_unreadable"] == 1
    flows = {f["tls"]["sni"] if f["tls"] else None for f in _flows(detecting, stream.machine_id)}
    assert flows == {"a.example.org", None}
