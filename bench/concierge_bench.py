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
GUEST_LIST = "/cardex/guests"
BARE = "/health"
OUT = Path(__file__).resolve().parents[1] / "var" / "bench"


def _serve(state: str, conn: Any) -> None:
    """Child process: build the concierge, seed it, serve, and publish on command."""
    import logging

    logging.disable(logging.INFO)
    from concierge.app import build
    from concierge.settings import Settings

    concierge = build(Settings(state_dir=Path(state), kdf_n=2**10))
    users = concierge.services["users"]
    sessions = concierge.services["sessions"]
    now = concierge.clock.iso()
    staff_id = users.store.create("bench-staff@hotel.test", "Staff", "x", "Bench Hotel", now)
    org = sessions.store.first_organization(staff_id)
    staff_sid, _ = sessions.start(staff_id, org)
    guests = concierge.services["cardex"].store
    with concierge.db.transaction() as tx:  # through the register's own write path, as staff and PMS imports write
        for i in range(GUESTS):
            values = {"first_name": f"First{i}", "last_name": f"Last{i:05d}", "email": f"g{i}@mail.test", "phone": f"+33 6 {i:08d}", "room": str(100 + i % 400), "vip": i % 20 == 0}
            guests.insert(tx, org, values, "arrived" if i % 3 else "expected", now)
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


def _load(port: int, sid: str, path: str) -> tuple[float, list[float]]:
    """One round: CLIENT_THREADS keep-alive clients GET `path` for SECONDS_PER_ROUND; (requests/s, latencies in s)."""
    stop = time.monotonic() + SECONDS_PER_ROUND
    latencies: list[list[float]] = [[] for _ in range(CLIENT_THREADS)]

    def worker(n: int) -> None:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        headers = {"Cookie": f"concierge_session={sid}"}
        mine = latencies[n]
        while True:
            sent = time.monotonic()
            if sent >= stop:
                break
            c.request("GET", path, headers=headers)
            resp = c.getresponse()
            body = resp.read()
            mine.append(time.monotonic() - sent)
            if resp.status != 200:
                raise RuntimeError(f"GET {path} answered {resp.status}: {body[:200]!r}")
        c.close()

    started = time.monotonic()
    threads = [threading.Thread(target=worker, args=(n,)) for n in range(CLIENT_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [x for mine in latencies for x in mine]
    return len(every) / (time.monotonic() - started), every


def _p99_ms(latencies: list[float]) -> float:
    return statistics.quantiles(latencies, n=100)[98] * 1000


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
        for path in (BARE, GUEST_LIST):  # warm-up
            _load(port, info["staff"], path)
        bare_rounds, list_rounds = [], []
        for _ in range(ROUNDS):  # interleaved, so both see the same machine load
            bare_rounds.append(_load(port, info["staff"], BARE))
            list_rounds.append(_load(port, info["staff"], GUEST_LIST))
        bare_rps = [r for r, _ in bare_rounds]
        rps = [r for r, _ in list_rounds]
        ratio = statistics.median(rps) / statistics.median(bare_rps)
        list_p99 = statistics.median(_p99_ms(lat) for _, lat in list_rounds)
        bare_p99 = statistics.median(_p99_ms(lat) for _, lat in bare_rounds)
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
        load = os.getloadavg()[0]
        figures = {
            "measured_at": f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC",
            "machine": f"{os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}, SQLite, load average {load:.1f}",
            "guest_list": {"path": GUEST_LIST, "guests": GUESTS, "clients": CLIENT_THREADS, "requests_per_s": round(statistics.median(rps)), "rounds": [round(r) for r in rps], "p99_ms": round(list_p99, 2)},
            "bare": {"path": BARE, "requests_per_s": round(statistics.median(bare_rps)), "rounds": [round(r) for r in bare_rps], "p99_ms": round(bare_p99, 2)},
            "guest_list_to_bare_ratio": round(ratio, 2),
            "sse": {"streams": STREAMS, "median_ms": round(statistics.median(medians), 2), "p99_ms": round(statistics.median(p99s), 2)},
        }
        lines = [
            f"concierge bench {figures['measured_at']}, {figures['machine']}",
            f"GET {GUEST_LIST} ({GUESTS} guests, page of 100 + total, {CLIENT_THREADS} keep-alive clients): {statistics.median(rps):.0f} requests/s "
            f"(median of {ROUNDS} rounds: {', '.join(f'{r:.0f}' for r in rps)}), p99 {list_p99:.2f} ms",
            f"GET {BARE} (bare endpoint, same server, same clients, interleaved rounds): {statistics.median(bare_rps):.0f} requests/s "
            f"(rounds: {', '.join(f'{r:.0f}' for r in bare_rps)}), p99 {bare_p99:.2f} ms; guest list / bare = {ratio:.2f}",
            f"publish-to-delivery with {STREAMS} open SSE streams (one publish per stream per round): "
            f"median {statistics.median(medians):.2f} ms, p99 {statistics.median(p99s):.2f} ms (medians of {ROUNDS} rounds)",
        ]
        print("\n".join(lines))
        OUT.mkdir(parents=True, exist_ok=True)
        (OUT / "concierge.txt").write_text("\n".join(lines) + "\n")
        (OUT / "concierge.json").write_text(json.dumps(figures, indent=1) + "\n")
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
