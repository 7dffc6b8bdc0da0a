"""Agent benchmark: decoded packets/s from real captures on one core, and capture loss under a burst.

1. Decode: the frames of the fixture pcaps (real traffic) replicated to ~100,000 and decoded by
   one thread; then decode + encode into PacketBatch messages, the agent's whole per-packet cost
   before the network. Median of ROUNDS.
2. Capture loss (root only): the namespace lab; the agent (from source) captures in its namespace
   and streams over mTLS to an appliance in the root namespace; the peer namespace sends BURST UDP
   datagrams to the agent's address as fast as one Python sender can; loss = 1 - (packets the
   appliance counted for that 5-tuple) / (datagrams sent). Median of LOSS_ROUNDS.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PCAPS = ROOT / "tests" / "fixtures" / "pcaps"
ROUNDS = 5
FRAMES = 100_000
LOSS_ROUNDS = 3
BURST = 20_000
BURST_PORT = 9999


def decode_rate() -> tuple[float, float]:
    from agents import wire
    from agents.decode import Decoder, DirectionResolver
    from agents.pcapfile import read_capture

    frames = [f for path in sorted(PCAPS.glob("*.pcap")) for f in read_capture(path)]
    frames = (frames * (FRAMES // len(frames) + 1))[:FRAMES]
    decode_only, with_encode = [], []
    for _ in range(ROUNDS):
        decoder = Decoder(DirectionResolver(infer=True))
        decode = decoder.decode
        started = time.perf_counter()
        packets = [p for f in frames if (p := decode(f.linktype, f.data, f.timestamp_ns)) is not None]
        decode_only.append(len(frames) / (time.perf_counter() - started))
        started = time.perf_counter()
        for i in range(0, len(packets), 256):
            for message in wire.packet_batch(packets[i : i + 256]):
                message.SerializeToString()  # type: ignore[attr-defined]
        encode_s = time.perf_counter() - started
        with_encode.append(len(frames) / (len(frames) / decode_only[-1] + encode_s))
    return statistics.median(decode_only), statistics.median(with_encode)


def capture_loss() -> list[tuple[int, int, float]]:
    """[(sent, counted, send seconds)] per round."""
    from tests.agents.netns import Lab
    from tests.conftest import start_appliance

    results = []
    lab = Lab.create()
    try:
        root_addr, _ = lab.uplink
        agent_addr, peer_addr = lab.link
        with tempfile.TemporaryDirectory() as tmp:
            running = start_appliance(Path(tmp) / "appliance", grpc={"listen": f"{root_addr}:0"},
                                      tls={"server_names": ["localhost", "127.0.0.1", root_addr]})
            try:
                issued = running.app.ca.issue_agent("sensor-agent-bench0")
                for name, data in (("ca.pem", running.app.ca.ca_pem), ("agent.pem", issued.cert_pem),
                                   ("agent.key", issued.key_pem)):
                    (Path(tmp) / name).write_bytes(data)
                agent = lab.spawn(lab.agent_ns, sys.executable, "-m", "agents", "--target",
                                  f"{root_addr}:{running.app.grpc_port}", "--ca-cert", f"{tmp}/ca.pem",
                                  "--cert", f"{tmp}/agent.pem", "--key", f"{tmp}/agent.key",
                                  "--machine-id", "bench-agent", "--queue-size", "500000", "--no-processes",
                                  log=Path(tmp) / "agent.log")
                deadline = time.monotonic() + 20
                while not [a for a in running.app.agents.all() if a.streams] and time.monotonic() < deadline:
                    time.sleep(0.1)
                agent_id = running.app.agents.all()[0].agent_id
                for _ in range(LOSS_ROUNDS):
                    done = lab.ns(lab.peer_ns, sys.executable, str(ROOT / "tests" / "agents" / "lab_traffic.py"),
                                  "burst", agent_addr, str(BURST_PORT), str(BURST))
                    sent = json.loads(done.stdout)
                    sport = sent["local"][1]
                    counted = _settle(running, agent_id, sport)
                    results.append((sent["sent"], counted, sent["seconds"]))
                lab.stop(agent)
            finally:
                running.app.stop()
    finally:
        lab.close()
    return results


def _settle(running: object, agent_id: str, remote_port: int) -> int:
    """Packets the appliance counted for the burst's 5-tuple, once the number stops moving."""
    last, stable_since = -1, time.monotonic()
    while time.monotonic() - stable_since < 1.5:
        count = 0
        for flow in running.app.tracker.snapshot(agent_id, 100_000):  # type: ignore[attr-defined]
            if flow.remote_port == remote_port and flow.local_port == BURST_PORT:
                count += flow.packets_in
        finished = getattr(running.app, "finished", None)
        if finished is not None:
            for flow in finished.newest(agent_id, 100_000):
                if flow.remote_port == remote_port and flow.local_port == BURST_PORT:
                    count += flow.packets_in
        if count != last:
            last, stable_since = count, time.monotonic()
        time.sleep(0.2)
    return last


def main() -> None:
    subprocess.run(["make", "-s", "agents-gen"], cwd=ROOT, check=True)
    decode, encode = decode_rate()
    lines = [f"agent decode: {decode:,.0f} packets/s on one core (median of {ROUNDS} rounds, {FRAMES:,} real frames)",
             f"agent decode+encode to PacketBatch: {encode:,.0f} packets/s on one core"]
    figures: dict = {"taken_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "rounds": ROUNDS,
                     "decode_pkt_s": decode, "decode_encode_pkt_s": encode}
    from tests.agents.netns import lab_available

    reason = lab_available()
    if reason:
        lines.append(f"agent capture loss: skipped ({reason})")
        figures["capture_loss_skipped"] = reason
    else:
        rounds = capture_loss()
        losses = [1 - counted / sent for sent, counted, _ in rounds]
        rates = [sent / seconds for sent, _, seconds in rounds]
        detail = ", ".join(f"{counted}/{sent}" for sent, counted, _ in rounds)
        lines.append(f"agent capture loss under a {BURST:,}-datagram burst at ~{statistics.median(rates):,.0f} packets/s: "
                     f"{statistics.median(losses):.2%} (median of {len(rounds)} rounds; counted/sent {detail})")
        figures.update(capture_loss=statistics.median(losses), burst_pkt_s=statistics.median(rates),
                       rounds_counted_sent=[[counted, sent] for sent, counted, _ in rounds])
    print("\n".join(lines))
    out = ROOT / "var" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    (out / "agent.txt").write_text("\n".join(lines) + "\n")
    (out / "agent.json").write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
