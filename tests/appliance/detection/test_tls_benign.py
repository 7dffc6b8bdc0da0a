"""Benign office traffic with the TLS detectors on, over gRPC: browsers (Chrome- and Firefox-shaped hellos,
HTTP/2), SaaS and package mirrors answering TLS 1.2 with chains under a trusted root or TLS 1.3, apt over
HTTP, and a browser update that changes the JA4 fleet-wide after the learning hour: zero alerts."""

from __future__ import annotations

import datetime
import random

from tests.appliance.detection import scenarios as sc
from tests.appliance.detection import tls_certs as tc
from tests.appliance.detection import tls_records as tr
from tests.appliance.detection.conftest import alerts_of, recorded_detections, start_detecting

GREASE = [0x0A0A, 0x1A1A, 0x2A2A, 0x3A3A]
CHROME_CIPHERS = [0x1301, 0x1302, 0x1303, 0xC02B, 0xC02F, 0xC02C, 0xC030, 0xCCA9, 0xCCA8, 0xC013, 0xC014,
                  0x009C, 0x009D, 0x002F, 0x0035]
CHROME_EXTENSIONS = [0x001B, 0x0000, 0x0033, 0x0010, 0x4469, 0x0017, 0x002D, 0x000D, 0x0005, 0x0023, 0x0012,
                     0x002B, 0xFF01, 0x000B, 0x000A, 0x0015]
FIREFOX_CIPHERS = [0x1301, 0x1303, 0x1302, 0xC02B, 0xC02F, 0xCCA9, 0xCCA8, 0xC02C, 0xC030, 0xC00A, 0xC009,
                   0xC013, 0xC014, 0x009C, 0x009D, 0x002F, 0x0035]
FIREFOX_EXTENSIONS = [0x0000, 0x0017, 0xFF01, 0x000A, 0x000B, 0x0023, 0x0010, 0x0005, 0x0022, 0x0033, 0x002B,
                      0x000D, 0x002D, 0x001C, 0x001B, 0xFE0D]
SIG_ALGS = [0x0403, 0x0804, 0x0401, 0x0503, 0x0805, 0x0501, 0x0806, 0x0601]
SAAS = ["outlook.office365.com", "teams.microsoft.com", "app.slack.com", "docs.google.com", "www.salesforce.com",
        "api.github.com", "zoom.us", "www.dropbox.com"]
MIRRORS = ["pypi.org", "files.pythonhosted.org", "registry.npmjs.org", "security.debian.org"]


def chrome(sni: str, rng: random.Random, updated: bool = False) -> bytes:
    extensions = list(CHROME_EXTENSIONS)
    rng.shuffle(extensions)  # Chrome permutes its extensions on every hello; JA4 sorts them
    if updated:
        extensions.append(0xFE0D)  # the new version adds encrypted_client_hello
    return tr.client_hello([rng.choice(GREASE)] + CHROME_CIPHERS, [rng.choice(GREASE)] + extensions, sni=sni,
                           alpn=[b"h2", b"http/1.1"], sig_algs=SIG_ALGS, versions=[rng.choice(GREASE), 0x0304, 0x0303],
                           groups=[rng.choice(GREASE), 0x001D, 0x0017, 0x0018], point_formats=[0])


def firefox(sni: str, rng: random.Random) -> bytes:
    return tr.client_hello(FIREFOX_CIPHERS, FIREFOX_EXTENSIONS, sni=sni, alpn=[b"h2", b"http/1.1"], sig_algs=SIG_ALGS,
                           versions=[0x0304, 0x0303], groups=[0x001D, 0x0017, 0x0018, 0x0019], point_formats=[0])


def test_office_browsing_saas_and_updates_with_a_browser_update_raise_no_alert(tmp_path):
    t0 = datetime.datetime.fromtimestamp(sc.T0_MS / 1000, datetime.UTC)
    root, intermediate = tc.public_pki(t0)
    anchors = tmp_path / "roots.pem"
    anchors.write_bytes(root.pem)
    chains = {name: [tc.issue(name, issuer=intermediate, dns=[name, f"*.{name}"], not_before=t0 - 30 * tc.DAY).der,
                     intermediate.der] for name in SAAS + MIRRORS}
    minutes = 80
    streams = []
    for n in range(8):  # 6 of 8 run the sync client: its push service is shared infrastructure, not a beacon
        rng = random.Random(700 + n)
        s = sc.benign_office(n, minutes=minutes)  # browsing, CDN, push service, NTP, ping, apt over HTTP, calls
        browser = chrome if n % 3 else firefox
        t = sc.T0_MS + rng.randint(0, 30_000)
        while t < sc.T0_MS + minutes * 60_000:
            name = rng.choice(SAAS + MIRRORS)
            address = s.dns(t, name)[0]
            updated = browser is chrome and t > sc.T0_MS + (70 + n) * 60_000  # rolled out desk by desk
            hello = chrome(name, rng, updated) if browser is chrome else firefox(name, rng)
            if rng.random() < 0.5:  # TLS 1.2 answer: the chain is in clear and judged
                reply = tr.server_flight(0xC02F, [0xFF01, 0x0017, 0x0023, 0x0010], chains[name])
            else:  # TLS 1.3: certificates are encrypted
                reply = tr.server_hello(0x1301, [0x002B, 0x0033], selected=0x0304)
            s.tcp(t + 30, address, 443, hello, rng.randint(800, 40_000), rng.randint(5_000, 900_000), reply=reply)
            t += rng.randint(10_000, 60_000)
        streams.append(s)
    running = start_detecting(tmp_path, paths={"tls_trust_anchors": str(anchors)})
    try:
        seen = recorded_detections(running)
        assert sc.stream_together(running, streams) == sum(len(s.packets) for s in streams)
        assert alerts_of(running) == []
        metrics = running.rest.get("/api/v1/metrics")[1]
        assert metrics["analysis_errors"] == 0 and metrics["tls_handshakes"] > 1500
        assert metrics["tls_certificates_unreadable"] == 0
        status, body = running.rest.get("/api/v1/flows?limit=1000&state=finished")
        judged = [f for f in body["flows"] if f["tls"] and f["tls"]["certificate"]]
        assert judged and all(f["tls"]["chain_length"] == 2 for f in judged)  # chains were read and found clean
        assert not [d for d in seen if d.detector.startswith("dpi.tls.cert_")]
        rare = [d for d in seen if d.detector == "dpi.tls.rare_fingerprint"]
        # The updated Chrome is new to the fleet once, on the first desk that shows it; not rare after that.
        assert len(rare) == 1 and rare[0].evidence["ja4"].startswith("t13d1517h2_")
    finally:
        running.app.stop()
