"""The REST port under hostile connections: huge headers, idle TLS clients, plain HTTP on HTTPS."""

import socket
import ssl
import time


def _status(appliance, timeout=10):
    started = time.monotonic()
    status, body = appliance.rest.get("/api/status", token=None)
    return status, time.monotonic() - started


def test_oversized_headers_are_refused_before_they_fill_memory(appliance):
    ctx = ssl.create_default_context(cafile=str(appliance.app.ca.ca_cert_path))
    with socket.create_connection(("localhost", appliance.app.rest_port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
            tls.sendall(b"GET /api/status HTTP/1.1\r\nHost: localhost\r\nX-Big: " + b"a" * (512 * 1024) + b"\r\n\r\n")
            reply = tls.recv(200)
    assert reply.startswith(b"HTTP/1.1 413") or reply.startswith(b"HTTP/1.1 431") or reply.startswith(b"HTTP/1.1 400")
    assert _status(appliance)[0] == 200


def test_idle_clients_that_never_shake_hands_do_not_block_others(appliance):
    idle = []
    try:
        for _ in range(3 * appliance.app.settings.rest.threads):  # more silent clients than worker threads
            idle.append(socket.create_connection(("127.0.0.1", appliance.app.rest_port), timeout=5))
            status, took = _status(appliance)
            assert status == 200 and took < 3, took
    finally:
        for sock in idle:
            sock.close()


def test_plain_http_on_the_https_port_fails_that_connection_only(appliance):
    with socket.create_connection(("127.0.0.1", appliance.app.rest_port), timeout=10) as raw:
        raw.sendall(b"GET /api/status HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            raw.recv(100)
        except OSError:
            pass
    assert _status(appliance)[0] == 200


def test_the_listener_keeps_its_backlog_once_serving(appliance):
    """The kernel holds LISTEN_BACKLOG connections for the event loop (asyncio would listen again with 100): a burst
    of clients does not drop another's SYN, which would cost it a second."""
    import subprocess

    from appliance.rest.server import LISTEN_BACKLOG

    port = int(appliance.rest.base.rsplit(":", 1)[1])
    listening = subprocess.run(["ss", "-H", "-ltn", f"sport = :{port}"], capture_output=True, text=True, check=True).stdout.split()
    assert listening[0] == "LISTEN" and int(listening[2]) == LISTEN_BACKLOG == 512, listening
