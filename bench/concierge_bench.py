"""Concierge figures: GET /cardex/guests requests/s with 10,000 guests, and publish-to-delivery latency
(median, p99) with 200 open SSE streams. The server runs in a child process; medians of several rounds."""

from __future__ import annotations

import http.client
import json
import multiprocessing as mp
import os
import platform
import re
import selectors
import socket
import statistics
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

GUESTS = 10_000
STREAMS = 200
ROUNDS = 5
SECONDS_PER_ROUND = 3.0
CLIENT_THREADS = 4


def _serve(state: str, conn: Any) -> None:
    """Child process: build the concierge, seed it, serve, and publish on command."""
    import logging

    logging.disable(logging.INFO)
    from concierge.app import build
    from concierge.clock import new_id
    from concierge.settings import Settings

    concierge = build(Settings(state_dir=Path(state), kdf_n=2**10))
    users = concierge.services["users"]
    sessions = concierge.services["sessions"]
    now = concierge.clock.iso()
    staff_id = users.store.create("bench-staff@hotel.test", "Staff", "x", "Bench Hotel", now)
    org = sessions.store.first_organization(staff_id)
    staff_sid, _ = sessions.start(staff_id, org)
    with concierge.db.transaction() as tx:
        for i in range(GUESTS):
            tx.execute(
                "INSERT INTO guests (id, organization_id, first_name, last_name, email, phone, room, vip, status, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (new_id("gst"), org, f"First{i}", f"Last{i:05d}", f"g{i}@mail.test", f"+33 6 {i:08d}", str(100 + i % 400), int(i % 20 == 0), "arrived" if i % 3 else "expected", now, now),
            )
    guest_sids, channels = [], []
    for i in range(STREAMS):
        uid = users.store.create(f"bench-guest{i}@hotel.test", f"Guest {i}", "x", None, now)
        users.store.add_member(org, uid, "guest", now)
        sid, _ = sessions.start(uid, org)
        guest_sids.append(sid)
        channels.append(f"guest:{uid}:status")
    port = concierge.start(0)
    conn.send({"port": port, "staff": staff_sid, "guests": guest_sids})
    while True:
        command = conn.recv()
        if command == "stop":
            break
        if command == "publish":
            for channel in channels:
                concierge.pubsub.publish(channel, {"status": "arrived", "ts": time.time()})
            conn.send("published")
    concierge.stop()
    conn.send("stopped")


def _requests_per_second(port: int, sid: str) -> float:
    stop = time.monotonic() + SECONDS_PER_ROUND
    counts = [0] * CLIENT_THREADS

    def worker(n: int) -> None:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        headers = {"Cookie": f"concierge_session={sid}"}
        while time.monotonic() < stop:
            c.request("GET", "/cardex/guests", headers=headers)
            resp = c.getresponse()
            body = resp.read()
            if resp.status != 200:
                raise RuntimeError(f"GET /cardex/guests answered {resp.status}: {body[:200]!r}")
            counts[n] += 1
        c.close()

    started = time.monotonic()
    threads = [threading.Thread(target=worker, args=(n,)) for n in range(CLIENT_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.monotonic() - started)


_DATA = re.compile(rb"data: (\{[^\n]*\})\n")


def _open_streams(port: int, sids: list[str]) -> list[socket.socket]:
    socks = []
    for sid in sids:
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(f"GET /check-in/stream HTTP/1.1\r\nHost: bench\r\nCookie: concierge_session={sid}\r\nAccept: text/event-stream\r\n\r\n".encode())
        socks.append(s)
    for s in socks:  # wait for every `ready`
        buf = b""
        while b"event: ready" not in buf:
            chunk = s.recv(4096)
            if not chunk:
                raise RuntimeError("stream closed before ready")
            buf += chunk
        s.setblocking(False)
    return socks


def _latencies(socks: list[socket.socket], conn: Any) -> list[float]:
    sel = selectors.DefaultSelector()
    for s in socks:
        sel.register(s, selectors.EVENT_READ)
    conn.send("publish")
    pending, out = len(socks), []
    buffers: dict[socket.socket, bytes] = {}
    deadline = time.monotonic() + 30
    while pending and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=1):
            s = key.fileobj
            data = s.recv(65536)  # type: ignore[union-attr]
            now = time.time()
            buf = buffers.get(s, b"") + data  # type: ignore[arg-type]
            for match in _DATA.finditer(buf):
                payload = json.loads(match.group(1))
                if "ts" in payload:
                    out.append(now - payload["ts"])
                    pending -= 1
            buffers[s] = buf[buf.rfind(b"\n") + 1 :]  # type: ignore[index]
    sel.close()
    conn.recv()
    if pending:
        raise RuntimeError(f"{pending} streams did not receive the event")
    return out


def main() -> None:
    state = tempfile.mkdtemp(prefix="concierge-bench-")
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_serve, args=(state, child), daemon=True)
    proc.start()
    try:
        info = parent.recv()
        port = info["port"]
        _requests_per_second(port, info["staff"])  # warm-up
        rps = [_requests_per_second(port, info["staff"]) for _ in range(ROUNDS)]
        socks = _open_streams(port, info["guests"])
        try:
            _latencies(socks, parent)  # warm-up
            rounds = [_latencies(socks, parent) for _ in range(ROUNDS)]
        finally:
            for s in socks:
                s.close()
        medians = [statistics.median(r) * 1000 for r in rounds]
        p99s = [statistics.quantiles(r, n=100)[98] * 1000 for r in rounds]
        cpu = platform.processor() or platform.machine()
        print(f"concierge bench {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}, SQLite")
        print(f"GET /cardex/guests ({GUESTS} guests, page of 100 + total, {CLIENT_THREADS} keep-alive clients): {statistics.median(rps):.0f} requests/s (median of {ROUNDS} rounds: {', '.join(f'{r:.0f}' for r in rps)})")
        print(
            f"publish-to-delivery with {STREAMS} open SSE streams (one publish per stream per round): "
            f"median {statistics.median(medians):.2f} ms, p99 {statistics.median(p99s):.2f} ms (medians of {ROUNDS} rounds)"
        )
    finally:
        parent.send("stop")
        if parent.poll(15):
            parent.recv()
        proc.join(timeout=15)
        if proc.is_alive():
            proc.terminate()
            proc.join()


if __name__ == "__main__":
    main()
