"""Console benchmark: latency of the console's polling through the dashboard while 20 agents stream.

Three real processes: the appliance (`python -m appliance`), the dashboard (`python -m appliance.dashboard`)
and 20 agents streaming real gRPC over mutual TLS (one process, one thread and channel per agent, each
paced at 500 packets/s of the office scenario). This process signs in like the browser and polls what
the console polls (metrics every second, the inbox, groups, agents, history) over one kept-alive HTTPS
connection; the same polls straight to the REST API with the admin token are the baseline measured in
the same run. p50/p99 are medians over rounds. Target: p99 through the dashboard under 50 ms.
Also: the gzipped size of the built JavaScript in console/dist (target under 100 KB).
Figures go to stdout and to var/bench/console.txt and var/bench/console.json.
"""

from __future__ import annotations

import gzip
import http.client
import json
import os
import platform
import re
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "var" / "bench"
AGENTS = 20
AGENT_PPS = 500
ROUNDS = 3
POLL_SECONDS = 8.0
WARMUP_SECONDS = 3.0
TARGET_P99_MS = 50.0
TARGET_BUNDLE_KB = 100.0
POLLS = ("/api/v1/metrics", "/api/v1/alerts?status=New&limit=50", "/api/v1/alerts/groups?not_status=Resolved,FalsePositive",
         "/api/v1/agents", "/api/v1/metrics", "/api/v1/metrics/history")
POLL_GAP_S = 0.05  # 20 requests/s: a console tab with every panel refreshing


def agents_main(grpc_port: int, certs_dir: str, seconds: float) -> None:
    """The agents process: 20 paced mTLS streams of the office scenario for `seconds`."""
    sys.path.insert(0, str(ROOT))
    import grpc

    from appliance.generated import sensor_pb2_grpc
    from appliance.pki import CertificateAuthority
    from tests.appliance.detection import scenarios as sc

    ca = CertificateAuthority.ensure(Path(certs_dir), ["localhost"])
    stop_at = time.monotonic() + seconds

    def one(n: int) -> None:
        issued = ca.issue_agent(f"sensor-agent-bench{n:02d}")
        creds = grpc.ssl_channel_credentials(ca.ca_pem, issued.key_pem, issued.cert_pem)
        channel = grpc.secure_channel(f"127.0.0.1:{grpc_port}", creds, options=[("grpc.ssl_target_name_override", "localhost")])
        stub = sensor_pb2_grpc.SensorServiceStub(channel)
        batches = list(sc.batches(sc.benign_office(n, minutes=10).sorted(), size=AGENT_PPS))

        def paced():  # one batch of AGENT_PPS packets a second, round and round
            i = 0
            while time.monotonic() < stop_at:
                yield batches[i % len(batches)]
                i += 1
                time.sleep(1.0)

        try:
            stub.StreamPacketBatches(paced(), metadata=[("x-machine-id", f"bench-agent-{n:02d}")])
        except grpc.RpcError as err:
            print(f"agent {n}: {err.code()}", file=sys.stderr)
        channel.close()

    threads = [threading.Thread(target=one, args=(n,)) for n in range(AGENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _read_banner(proc: subprocess.Popen, pattern: str, timeout: float = 60.0) -> re.Match:
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        match = re.search(pattern, line)
        if match:
            return match
    raise RuntimeError(f"no {pattern!r} in:\n{''.join(seen)}")


class Poller:
    """One kept-alive HTTPS connection, as the browser keeps one to port 3000."""

    def __init__(self, port: int, context: ssl.SSLContext, headers: dict[str, str]) -> None:
        self.conn = http.client.HTTPSConnection("localhost", port, context=context, timeout=30)
        self.headers = headers

    def call(self, method: str, path: str, body: bytes | None = None, extra: dict[str, str] | None = None) -> tuple[int, bytes, http.client.HTTPResponse]:
        self.conn.request(method, path, body=body, headers={**self.headers, **(extra or {})})
        reply = self.conn.getresponse()
        return reply.status, reply.read(), reply

    def measure(self, seconds: float) -> list[float]:
        latencies: list[float] = []
        end = time.monotonic() + seconds
        i = 0
        while time.monotonic() < end:
            path = POLLS[i % len(POLLS)]
            i += 1
            start = time.perf_counter()
            status, _, _ = self.call("GET", path)
            latencies.append((time.perf_counter() - start) * 1000)
            if status != 200:
                raise RuntimeError(f"{path}: HTTP {status}")
            time.sleep(POLL_GAP_S)
        return latencies


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def bundle_size() -> dict[str, float] | None:
    assets = ROOT / "console" / "dist" / "assets"
    scripts = sorted(assets.glob("*.js")) if assets.is_dir() else []
    if not scripts:
        return None
    raw = sum(p.stat().st_size for p in scripts)
    gz = sum(len(gzip.compress(p.read_bytes(), 9)) for p in scripts)
    return {"files": len(scripts), "raw_kb": round(raw / 1024, 1), "gzip_kb": round(gz / 1024, 1)}


def run_round(tmp: Path) -> dict[str, float]:
    import yaml

    env = {k: v for k, v in os.environ.items() if k != "SENSOR_ADMIN_TOKEN"}
    config = tmp / "config.yaml"
    config.write_text(yaml.safe_dump({
        "grpc": {"listen": "127.0.0.1:0"}, "rest": {"listen": "127.0.0.1:0"},
        "paths": {"state_dir": str(tmp / "state"), "certs_dir": str(tmp / "certs"), "static_dir": str(tmp / "static"),
                  "signatures_dir": str(ROOT / "rules")},
        "tls": {"server_names": ["localhost", "127.0.0.1"]},
    }))
    procs: list[subprocess.Popen] = []
    try:
        appliance = subprocess.Popen([sys.executable, "-m", "appliance", "--config", str(config), "--log-level", "WARNING"],
                                     cwd=ROOT, stdout=subprocess.PIPE, text=True, env=env)
        procs.append(appliance)
        grpc_port = int(_read_banner(appliance, r"gRPC ingestion : port (\d+)").group(1))
        rest_port = int(_read_banner(appliance, r"REST API\s+: https://localhost:(\d+)/").group(1))
        board = tmp / "dashboard.yaml"
        data = yaml.safe_load(config.read_text())
        data["dashboard"] = {"listen": "127.0.0.1:0", "api_url": f"https://localhost:{rest_port}"}
        board.write_text(yaml.safe_dump(data))
        dashboard = subprocess.Popen([sys.executable, "-m", "appliance.dashboard", "--config", str(board), "--log-level",
                                      "WARNING"], cwd=ROOT, stdout=subprocess.PIPE, text=True, env=env)
        procs.append(dashboard)
        console_port = int(_read_banner(dashboard, r"console URL\s+: https://127\.0\.0\.1:(\d+)/").group(1))
        seconds = WARMUP_SECONDS + 2 * POLL_SECONDS + 5
        agents = subprocess.Popen([sys.executable, "-c", f"import bench.console_bench as b; b.agents_main({grpc_port}, "
                                   f"{str(tmp / 'certs')!r}, {seconds})"], cwd=ROOT, env=env)
        procs.append(agents)

        context = ssl.create_default_context(cafile=str(tmp / "certs" / "ca.pem"))
        password = (tmp / "state" / "console-admin.password").read_text().strip()
        console = Poller(console_port, context, {})
        status, body, reply = console.call("POST", "/auth/login", json.dumps({"username": "admin", "password": password}).encode(),
                                           {"Content-Type": "application/json"})
        assert status == 200, body
        console.headers["Cookie"] = reply.getheader("Set-Cookie").split(";")[0]
        token = (tmp / "state" / "admin.token").read_text().strip()
        direct = Poller(rest_port, context, {"Authorization": f"Bearer {token}"})

        time.sleep(WARMUP_SECONDS)  # the agents connect and ramp up
        through = console.measure(POLL_SECONDS)
        baseline = direct.measure(POLL_SECONDS)
        metrics = json.loads(direct.call("GET", "/api/v1/metrics")[1])
        return {"console_p50": percentile(through, 0.5), "console_p99": percentile(through, 0.99),
                "direct_p50": percentile(baseline, 0.5), "direct_p99": percentile(baseline, 0.99),
                "requests": len(through), "agents_online": metrics["agents_online"],
                "packets_per_second": metrics["packetsPerSecond"]}
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main() -> None:
    rounds = []
    for _ in range(ROUNDS):
        with tempfile.TemporaryDirectory() as tmp:
            rounds.append(run_round(Path(tmp)))
    med = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    bundle = bundle_size()
    result = {
        "date": time.strftime("%Y-%m-%d", time.gmtime()), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "agents": AGENTS, "agent_pps": AGENT_PPS, "rounds": ROUNDS, "poll_seconds": POLL_SECONDS,
        "console_p50_ms": round(med["console_p50"], 2), "console_p99_ms": round(med["console_p99"], 2),
        "direct_p50_ms": round(med["direct_p50"], 2), "direct_p99_ms": round(med["direct_p99"], 2),
        "p99_ratio_console_over_direct": round(med["console_p99"] / med["direct_p99"], 2) if med["direct_p99"] else None,
        "agents_online": med["agents_online"], "appliance_packets_per_second": med["packets_per_second"],
        "p99_target_ms": TARGET_P99_MS, "p99_within_target": med["console_p99"] < TARGET_P99_MS,
        "bundle": bundle, "bundle_target_gzip_kb": TARGET_BUNDLE_KB,
    }
    lines = [
        f"console polling with {AGENTS} agents streaming mTLS gRPC ({med['agents_online']:.0f} online, "
        f"{med['packets_per_second']:,.0f} packets/s at the appliance), median of {ROUNDS} rounds:",
        f"  through the dashboard : p50 {result['console_p50_ms']:.1f} ms, p99 {result['console_p99_ms']:.1f} ms "
        f"(target p99 < {TARGET_P99_MS:.0f} ms: {'met' if result['p99_within_target'] else 'NOT met'})",
        f"  REST API directly     : p50 {result['direct_p50_ms']:.1f} ms, p99 {result['direct_p99_ms']:.1f} ms "
        f"(dashboard/direct p99 ratio {result['p99_ratio_console_over_direct']})",
        (f"  console bundle        : {bundle['gzip_kb']} KB of JavaScript gzipped ({bundle['raw_kb']} KB raw, "
         f"{bundle['files']} files; target < {TARGET_BUNDLE_KB:.0f} KB)") if bundle
        else "  console bundle        : console/dist not built (run `make console`)",
    ]
    text = "\n".join(lines)
    print(text)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "console.txt").write_text(text + "\n")
    (OUT / "console.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
