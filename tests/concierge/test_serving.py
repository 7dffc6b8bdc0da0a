"""Serving: real nginx in front (SSE through it), two instances sharing Redis, 200 open streams, caps, dead clients."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import requests

from tests.concierge.conftest import PASSWORD, Client, Hotel, SseClient, make_hotel
from tests.polling import free_port, wait_port
from tests.polling import wait_for

SITE = Path(__file__).resolve().parents[2] / "packaging" / "nginx" / "concierge.conf"


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 made with `cryptography`, for nginx's TLS listener."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return cert_path, key_path


@pytest.fixture(params=["http", "https"])
def nginx_in_front(request: pytest.FixtureRequest, tmp_path: Path, make_concierge):
    """Real nginx from Debian with our site file (plain or with a TLS listener), in front of a concierge on port 0."""
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    if not os.path.exists(binary):
        pytest.fail("nginx is not installed (concierge/concierge.mk adds it to TEST_APT_PACKAGES; run make sysdeps-test)")
    concierge, base = make_concierge(trust_proxy=True)
    upstream_port = int(base.rsplit(":", 1)[1])
    port = free_port()
    listen = f"listen 127.0.0.1:{port};"
    if request.param == "https":
        cert, key = _self_signed(tmp_path)
        listen = f"listen 127.0.0.1:{port} ssl;\n    ssl_certificate {cert};\n    ssl_certificate_key {key};"
    site = SITE.read_text().replace("127.0.0.1:8090", f"127.0.0.1:{upstream_port}").replace("listen 80;", listen)
    (tmp_path / "site.conf").write_text(site)
    (tmp_path / "nginx.conf").write_text(
        f"""user root;
worker_processes 1;
pid {tmp_path}/nginx.pid;
error_log {tmp_path}/error.log warn;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {tmp_path}/body;
    proxy_temp_path {tmp_path}/proxy;
    fastcgi_temp_path {tmp_path}/fastcgi;
    uwsgi_temp_path {tmp_path}/uwsgi;
    scgi_temp_path {tmp_path}/scgi;
    include {tmp_path}/site.conf;
}}
"""
    )
    proc = subprocess.Popen([binary, "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf"), "-g", "daemon off;"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_port(port)
        yield concierge, base, f"{request.param}://127.0.0.1:{port}", (tmp_path / "cert.pem" if request.param == "https" else None)
    finally:
        proc.send_signal(signal.SIGQUIT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.slow  # real nginx
def test_sse_events_arrive_through_nginx(nginx_in_front) -> None:
    concierge, direct, proxied, cert = nginx_in_front
    hotel = make_hotel(concierge, proxied, verify=cert)  # every request goes through nginx
    guest, guest_client = hotel.guest_with_account("Nia")
    stream = SseClient(proxied, guest_client.cookie, ca=cert)
    try:
        assert stream.status == 200
        assert stream.next_event() == {"event": "ready", "data": {"connected": True}}
        assert hotel.client("staff").post("/cardex/confirm-arrival", {"guestId": guest["id"]}).status_code == 200
        started = time.monotonic()  # the event is published before the POST answers: time its way out only
        event = stream.next_event()
        assert event["event"] == "status" and event["data"]["status"] == "arrived" and event["id"] == 1
        # Not held in a proxy buffer: a buffering proxy holds an event until kilobytes of heartbeats (minutes)
        # have filled its buffer, so a few seconds of scheduling on a loaded machine still tell the two apart.
        assert time.monotonic() - started < 5
        assert stream.response.readline() == b": heartbeat\n"  # heartbeats pass through too
    finally:
        stream.close()


@pytest.mark.slow  # real nginx
def test_session_cookie_is_secure_exactly_when_nginx_serves_https(nginx_in_front) -> None:
    concierge, direct, proxied, cert = nginx_in_front
    hotel = make_hotel(concierge, direct)
    resp = requests.post(proxied + "/users/sign-in", json={"email": hotel.emails["staff"], "password": PASSWORD}, verify=str(cert) if cert else True, timeout=10)
    assert resp.status_code == 200
    cookie = next(v for v in resp.raw.headers.getlist("Set-Cookie") if v.startswith("concierge_session="))
    assert ("secure" in cookie.lower()) == proxied.startswith("https://")


@pytest.mark.slow  # real redis-server and two instances
def test_two_instances_sharing_redis_deliver_to_each_other(tmp_path: Path, make_concierge, redis_url: str) -> None:
    state = tmp_path / "shared"
    first, base_a = make_concierge(state=state, pubsub_url=redis_url)
    second, base_b = make_concierge(state=state, pubsub_url=redis_url)
    hotel = make_hotel(first, base_a)
    guest, guest_client = hotel.guest_with_account("Ren")
    on_b = Client(base_b).sign_in(guest_client.me["user"]["email"])  # the guest's app talks to instance B
    stream = SseClient(base_b, on_b.cookie)
    try:
        assert stream.next_event()["event"] == "ready"
        hotel.client("staff").post("/cardex/confirm-arrival", {"guestId": guest["id"]})  # staff on instance A
        event = stream.next_event()
        assert event["data"]["status"] == "arrived" and event["id"] == 1
    finally:
        stream.close()
    hotel.client("staff").post("/cardex/check-out", {"guestId": guest["id"]})
    resumed = SseClient(base_a, on_b.cookie, last_event_id="1")  # resumes on the other instance
    try:
        assert resumed.next_event()["event"] == "ready"
        replay = resumed.next_event()
        assert replay["id"] == 2 and replay["data"]["status"] == "checked_out"
    finally:
        resumed.close()


@pytest.mark.slow  # 200 real streams
def test_200_open_streams_do_not_starve_ordinary_requests(make_concierge) -> None:
    concierge, base = make_concierge(sse_max_streams_per_user=250, sse_heartbeat_seconds=5)
    hotel = make_hotel(concierge, base)
    _, guest_client = hotel.guest_with_account("Many")
    streams = []
    try:
        for _ in range(200):
            s = SseClient(base, guest_client.cookie)
            assert s.next_event()["event"] == "ready"
            streams.append(s)
        assert concierge.hub.open_streams == 200
        staff = hotel.client("staff")
        timings = []
        for _ in range(30):
            started = time.monotonic()
            assert staff.get("/cardex/guests").status_code == 200
            timings.append(time.monotonic() - started)
        # A starved request waits for a free thread, and no stream gives its thread back during this loop: it
        # would run into the client's 30 s timeout. 10 s leaves a loaded machine room and still tells them apart.
        assert max(timings) < 10.0, timings
        guest_user = guest_client.me["user"]["id"]
        concierge.pubsub.publish(f"guest:{guest_user}:status", {"status": "arrived"})
        assert all(s.next_event()["data"] == {"status": "arrived"} for s in streams)
    finally:
        for s in streams:
            s.close()


def test_per_user_cap_answers_503_with_retry_after(make_concierge) -> None:
    concierge, base = make_concierge(sse_max_streams_per_user=2)
    hotel = make_hotel(concierge, base)
    _, guest_client = hotel.guest_with_account("Cap")
    streams = [SseClient(base, guest_client.cookie) for _ in range(2)]
    try:
        for s in streams:
            s.next_event()
        resp = requests.get(base + "/check-in/stream", cookies={"concierge_session": guest_client.cookie}, timeout=10)
        assert resp.status_code == 503
        assert resp.headers["Retry-After"].isdigit()
        assert resp.json() == {"error": "At most 2 open streams per user"}
    finally:
        for s in streams:
            s.close()


def test_total_cap_answers_503(make_concierge) -> None:
    concierge, base = make_concierge(sse_max_streams_total=1)
    hotel = make_hotel(concierge, base)
    _, a = hotel.guest_with_account("One")
    _, b = hotel.guest_with_account("Two")
    first = SseClient(base, a.cookie)
    try:
        first.next_event()
        resp = requests.get(base + "/check-in/stream", cookies={"concierge_session": b.cookie}, timeout=10)
        assert resp.status_code == 503 and "Retry-After" in resp.headers
    finally:
        first.close()


def test_a_dead_client_is_noticed_and_its_slot_freed(make_concierge) -> None:
    concierge, base = make_concierge(sse_max_streams_per_user=1)
    hotel = make_hotel(concierge, base)
    _, guest_client = hotel.guest_with_account("Gone")
    stream = SseClient(base, guest_client.cookie)
    stream.next_event()
    assert concierge.hub.open_streams == 1
    stream.conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST on close, like a vanished phone
    stream.close()
    assert wait_for(lambda: concierge.hub.open_streams == 0), "the server kept the dead stream"
    again = SseClient(base, guest_client.cookie)  # the slot is usable again
    try:
        assert again.status == 200 and again.next_event()["event"] == "ready"
    finally:
        again.close()
