"""Item 1: slow HTTP clients (slowloris) against the REST port.

200 clients, each from its own loopback address so the per-source cap does not save the day, hold
TLS connections open the three slow ways: headers one line at a time, a handshake and then
silence, a body announced and sent one byte at a time. The status probe must be answered within
1 s throughout, by a server with 8 worker threads; the slow ones are cut at their deadlines and
counted.

The attackers run in a process of their own, as real ones do: 200 TLS handshakes in the test's
interpreter would hold the lock the server and the probe also need, and the probe would time the
attacker's CPU, not the server's answer.
"""

from __future__ import annotations

import asyncio
import ssl

import pytest

from tests.appliance.security.conftest import in_attacker_process, status_probe
from tests.conftest import start_appliance

CLIENTS = 200
DRIP_S = 0.5


@pytest.fixture
def slow_limited(tmp_path, monkeypatch):
    monkeypatch.delenv("SENSOR_ADMIN_TOKEN", raising=False)
    running = start_appliance(tmp_path, rest={"head_timeout": 3.0, "body_timeout": 3.0, "threads": 8})
    try:
        yield running
    finally:
        running.app.stop()


async def _slow_client(port: int, context: ssl.SSLContext, source: str, kind: str, seconds: float) -> bytes:
    """One slow client; returns what the server answered (b"" when it just closed)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost",
                                                   local_addr=(source, 0))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    try:
        if kind == "headers":
            writer.write(b"GET /api/status HTTP/1.1\r\nHost: x\r\n")
            i = 0
            while loop.time() < deadline and not reader.at_eof():
                writer.write(f"X-Slow-{i}: y\r\n".encode())
                await writer.drain()
                i += 1
                try:
                    return await asyncio.wait_for(reader.read(200), DRIP_S)
                except asyncio.TimeoutError:
                    continue
        elif kind == "body":
            writer.write(b"POST /api/v1/whitelist HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 1000\r\n\r\n")
            while loop.time() < deadline and not reader.at_eof():
                writer.write(b" ")
                await writer.drain()
                try:
                    return await asyncio.wait_for(reader.read(200), DRIP_S)
                except asyncio.TimeoutError:
                    continue
        else:  # silent after the handshake
            try:
                return await asyncio.wait_for(reader.read(200), seconds)
            except asyncio.TimeoutError:
                return b""
        return b""
    except (ConnectionError, ssl.SSLError):
        return b""
    finally:
        writer.transport.abort()


def _attack(port: int, ca_file: str, seconds: float) -> list[bytes]:
    context = ssl.create_default_context(cafile=ca_file)
    kinds = ["headers", "silent", "body"]

    async def run() -> list[bytes]:
        return await asyncio.gather(*(
            _slow_client(port, context, f"127.0.1.{i + 1}", kinds[i % 3], seconds) for i in range(CLIENTS)))

    return asyncio.run(run())


def _hold(port: int, ca_file: str, n: int) -> int:
    """Open n connections from one source; each made one is held until all n attempts have ended (made or
    refused), not for a fixed time: on a loaded machine the last handshakes may come after the first
    connections would let go. Returns how many were made."""
    context = ssl.create_default_context(cafile=ca_file)

    async def hold() -> int:
        tried = 0
        all_tried = asyncio.Event()

        async def one() -> bool:
            nonlocal tried
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context,
                                                          server_hostname="localhost", local_addr=("127.0.2.9", 0))
            except (ConnectionError, ssl.SSLError, OSError):
                writer = None
            tried += 1
            if tried == n:
                all_tried.set()
            if writer is None:
                return False
            await all_tried.wait()
            writer.transport.abort()
            return True

        return sum(await asyncio.wait_for(asyncio.gather(*(one() for _ in range(n))), 50))

    return asyncio.run(hold())


def test_200_slow_clients_do_not_stop_the_api_and_are_cut_at_their_deadlines(slow_limited):
    app = slow_limited.app
    with status_probe(slow_limited):
        results = in_attacker_process(_attack, app.rest_port, str(app.ca.ca_cert_path), 6.0)
    assert len(results) == CLIENTS
    head_replies = [r for i, r in enumerate(results) if i % 3 == 0]
    body_replies = [r for i, r in enumerate(results) if i % 3 == 2]
    # Cut with a documented answer at the 3 s deadlines, well before the clients' 6 s were over. A dripping
    # client may write its next byte into the closed socket and get a reset before it reads the 408 (b""):
    # the counters below say every one was cut; nothing else is ever answered.
    for replies in (head_replies, body_replies):
        assert all(r.startswith(b"HTTP/1.1 408 ") or r == b"" for r in replies), [r[:40] for r in replies]
        assert sum(r.startswith(b"HTTP/1.1 408 ") for r in replies) >= 0.9 * len(replies), [r[:40] for r in replies]
    counters = slow_limited.rest.get("/api/v1/metrics")[1]["rest_connections"]
    assert counters["head_timeout"] >= 2 * CLIENTS // 3 - 1  # the drippers and the silent ones
    assert counters["body_timeout"] >= CLIENTS // 3 - 1
    assert slow_limited.rest.post("/api/v1/whitelist", {"value": "198.51.100.7"})[0] == 201  # writes still work


def test_connections_beyond_the_per_source_cap_are_refused_and_counted(slow_limited):
    app = slow_limited.app
    cap = app.settings.rest.max_connections_per_source
    with status_probe(slow_limited):  # from 127.0.0.1: another source, still served
        held = in_attacker_process(_hold, app.rest_port, str(app.ca.ca_cert_path), cap + 40)
    assert held <= cap
    assert slow_limited.rest.get("/api/v1/metrics")[1]["rest_connections"]["refused_per_source_cap"] >= 40
