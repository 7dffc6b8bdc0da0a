"""Port-capture benchmark: packets/s the appliance's capture takes off a mirror port without loss, on one core.

The namespace lab of the tests (tests/appliance/capture/mirror.py): UDP datagrams of 100 bytes from
the inside host to the outside one, mirrored (tc mirred) onto the root-side veth. A paced sender
(pinned to the second core) offers RATES in turn, RATE_SECONDS each, ROUNDS times; loss at a rate =
1 - captured / sent, the median of its rounds. "Without loss" is the highest offered rate whose
median loss is 0.

Measured twice in the same run, both pinned to core 0 with the same 8 MiB socket buffer:
- baseline: a bare AF_PACKET socket bound to the port that only counts frames (no filter, no
  decoding, no stream): what one Python thread can read at all;
- capture: the appliance's capture process (`python -m appliance.capture`, started through
  POST /api/v1/capture/start: kernel BPF, decoder, protocol counting, batching, mTLS gRPC stream).
The ratio capture / baseline is the cost of everything the capture does per packet.

Root only (namespaces). Figures: stdout, var/bench/capture.txt and var/bench/capture.json.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "var" / "bench"
RATES = (10_000, 20_000, 40_000, 60_000, 80_000, 100_000, 120_000, 140_000, 160_000, 200_000)
RATE_SECONDS = 1.0
ROUNDS = 3
PORT = 9999
CAPTURE_CORE, SENDER_CORE = 0, 1
BUFFER_MIB = 8

# Paced UDP sender: argv peer port count rate; prints {"sent", "seconds"}.
SENDER = r"""
import json, os, socket, sys, time
os.sched_setaffinity(0, {int(sys.argv[5])})
peer, port, count, rate = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect((peer, port))
payload = b"b" * 100; sent = 0; start = time.perf_counter()
while sent < count:
    for _ in range(min(50, count - sent)):
        try: s.send(payload); sent += 1
        except OSError: pass
    ahead = start + sent / rate - time.perf_counter()
    if ahead > 0: time.sleep(ahead)
print(json.dumps({"sent": sent, "seconds": time.perf_counter() - start}))
"""

# Bare reader: argv ifname core seconds; counts UDP/IPv4 frames to PORT until idle for `seconds` after the first.
READER = r"""
import os, select, socket, struct, sys, time
os.sched_setaffinity(0, {int(sys.argv[2])})
s = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(3)); s.bind((sys.argv[1], 3))
s.setsockopt(socket.SOL_SOCKET, 33, %d * 1024 * 1024); s.setblocking(False)
print("ready", flush=True)
count = 0; drops = 0
for line in sys.stdin:
    if line.strip() == "read":
        deadline = None
        while True:
            r, _, _ = select.select([s], [], [], 0.2)
            if not r:
                if deadline is not None and time.monotonic() > deadline: break
                if deadline is None: deadline = time.monotonic() + float(sys.argv[3])
                continue
            deadline = time.monotonic() + float(sys.argv[3])
            while True:
                try: frame = s.recv(65536)
                except BlockingIOError: break
                if len(frame) >= 28 and frame[9] == 17 and frame[22:24] == b"\x27\x0f": count += 1
        packets, dropped = struct.unpack("II", s.getsockopt(263, 6, 8))
        print(count, dropped, flush=True); count = 0
    else:
        break
""" % BUFFER_MIB


def _send(lab: Any, outside: str, rate: int) -> dict[str, Any]:
    count = max(2_000, int(rate * RATE_SECONDS))
    done = lab.ns(lab.agent_ns, sys.executable, "-c", SENDER, outside, str(PORT), str(count), str(rate), str(SENDER_CORE))
    return dict(json.loads(done.stdout))


def _sweep(measure: Any) -> list[dict[str, Any]]:
    """[{rate, offered, loss, rounds}] for every rate until a median loss above 5% (no use going higher)."""
    results = []
    for rate in RATES:
        rounds = [measure(rate) for _ in range(ROUNDS)]
        loss = statistics.median(1 - captured / sent for sent, captured, _ in rounds)
        offered = statistics.median(sent / seconds for sent, _, seconds in rounds)
        results.append({"rate": rate, "offered": round(offered), "loss": round(loss, 5),
                        "rounds": [{"sent": s, "captured": c} for s, c, _ in rounds]})
        print(f"  rate {rate:>7,}/s offered {offered:>9,.0f}/s loss {loss:.2%}", flush=True)
        if loss > 0.05:
            break
    return results


def _lossless(results: list[dict[str, Any]]) -> float:
    clean = [r["offered"] for r in results if r["loss"] == 0]
    return float(max(clean)) if clean else 0.0


def baseline(lab: Any, outside: str) -> list[dict[str, Any]]:
    reader = subprocess.Popen([sys.executable, "-c", READER, lab.root_if, str(CAPTURE_CORE), "1.0"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert reader.stdout is not None and reader.stdin is not None
    assert reader.stdout.readline().strip() == "ready"

    def measure(rate: int) -> tuple[int, int, float]:
        reader.stdin.write("read\n")  # type: ignore[union-attr]  # reads while the sender sends
        reader.stdin.flush()  # type: ignore[union-attr]
        sent = _send(lab, outside, rate)
        captured = int(reader.stdout.readline().split()[0])  # type: ignore[union-attr]
        return sent["sent"], min(captured, sent["sent"]), sent["seconds"]

    try:
        return _sweep(measure)
    finally:
        reader.stdin.close()
        reader.wait(timeout=10)


def capture(lab: Any, outside: str, tmp: Path) -> list[dict[str, Any]]:
    from tests.appliance.capture.test_capture_lab import capture_appliance, settled, start_capture

    running = capture_appliance(lab, tmp)
    try:
        start_capture(running, lab, bufferSize=BUFFER_MIB, snaplen=2048)
        pid = running.rest.get("/api/v1/capture")[1]["pid"]
        os.sched_setaffinity(pid, {CAPTURE_CORE})

        def measure(rate: int) -> tuple[int, int, float]:
            before = settled(running)
            sent = _send(lab, outside, rate)
            after = settled(running)
            captured = after["protocolStats"]["UDP"] - before["protocolStats"]["UDP"]
            return sent["sent"], min(captured, sent["sent"]), sent["seconds"]

        return _sweep(measure)
    finally:
        running.app.stop()


def main() -> None:
    from tests.agents.netns import Lab, lab_available
    from tests.appliance.capture.mirror import mirror_link_onto_uplink

    reason = lab_available()
    if reason:
        print(f"capture bench: skipped ({reason})")
        return
    if len(os.sched_getaffinity(0)) < 2:
        print("capture bench: skipped (needs two cores: one captures, one sends)")
        return
    lab = Lab.create()
    try:
        mirror_link_onto_uplink(lab)
        _, outside = lab.link
        lab.spawn(lab.peer_ns, sys.executable, "-c", "import socket,sys\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
                  f"s.bind(('{outside}',{PORT}))\nwhile True: s.recv(4096)")
        lab.wait_port(lab.peer_ns, PORT, "udp")
        print("baseline: bare AF_PACKET reader, core 0", flush=True)
        bare = baseline(lab, outside)
        print("capture: the appliance's capture process, core 0", flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            captured = capture(lab, outside, Path(tmp))
    finally:
        lab.close()
    bare_rate, capture_rate = _lossless(bare), _lossless(captured)
    ratio = capture_rate / bare_rate if bare_rate else 0.0
    # When the bare reader lost nothing even at the fastest rate, the sender was its limit: the
    # baseline is at least that, and the ratio at most what is printed.
    bare_capped = all(r["loss"] == 0 for r in bare)
    at_least = ">= " if bare_capped else ""
    machine = f"{platform.machine()} {os.cpu_count()} cores, Linux {platform.release()}"
    text = (f"capture without loss on one core: {capture_rate:,.0f} packets/s (100-byte UDP, mirror port; "
            f"median loss of {ROUNDS} rounds per rate is 0)\n"
            f"baseline bare AF_PACKET reader on the same core: {at_least}{bare_rate:,.0f} packets/s"
            f"{' (no loss at the fastest rate the sender reached)' if bare_capped else ''}; ratio capture/baseline "
            f"{'<= ' if bare_capped else ''}{ratio:.2f}\n"
            f"rates offered: {', '.join(f'{r:,}' for r in RATES)} packets/s (the sweep stops past 5% loss); "
            f"{time.strftime('%Y-%m-%d')} on {machine}")
    print(text)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "capture.txt").write_text(text + "\n")
    (OUT / "capture.json").write_text(json.dumps({
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": machine,
        "lossless_packets_per_s": capture_rate, "baseline_lossless_packets_per_s": bare_rate, "baseline_limited_by_sender": bare_capped,
        "ratio": round(ratio, 3),
        "capture": captured, "baseline": bare, "rounds": ROUNDS, "rate_seconds": RATE_SECONDS,
        "buffer_mib": BUFFER_MIB,
    }, indent=1) + "\n")


if __name__ == "__main__":
    main()
