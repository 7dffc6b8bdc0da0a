"""The capture process: the agents' Linux capture on one interface, streamed into this appliance.

Reuses `agents/` whole: AF_PACKET + kernel BPF (`agents.capture.linux`), the decoder, and the
batching gRPC client (`agents.stream.StreamClient`) with a client certificate of its own ("the
appliance port <iface>"). It follows its spec file (re-read when it changes; `running: false`
idles) and writes its status file twice a second: counters, state, error, heartbeat.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

from agents import wire
from agents.agent import resolve_target
from agents.capture.linux import LinuxCapture
from agents.config import AgentConfig, Identity
from agents.decode import Decoder, DecodeStats, DirectionResolver
from agents.errors import AgentError
from agents.model import CapturedPacket
from agents.stream import Connection, StreamClient, StreamTuning
from appliance.capture.model import PROTOCOLS
from appliance.capture.spec import CA_FILE, CERT_FILE, KEY_FILE, SPEC_FILE, STATUS_FILE, RunnerSpec, read_json, write_json

log = logging.getLogger(__name__)

STATUS_INTERVAL = 0.5
# Exit codes the supervisor reads: 1 = this attempt failed (restart with backoff); 3 = no attempt can
# succeed (no CAP_NET_RAW), so the supervisor records the error and does not restart.
EXIT_FAILED = 1
EXIT_NOT_PERMITTED = 3
_HTTP_STARTS = (b"GET ", b"POST ", b"HEAD ", b"PUT ", b"DELETE ", b"OPTIONS ", b"PATCH ", b"CONNECT ", b"HTTP/1.")
_TCP, _UDP, _DNS, _HTTP, _TLS, _ICMP = range(6)


def identity_of(interface: str, version: str) -> Identity:
    """The capture's agent identity: one per interface, stable across restarts."""
    return Identity(machine_id=f"appliance-port:{interface}", hostname=f"the appliance port {interface}",
                    os="linux", version=version)


def parse_networks(networks: list[str]) -> list[tuple[int, int]]:
    """(network, mask) integer pairs of IPv4 CIDRs."""
    pairs = []
    for text in networks:
        net = ipaddress.IPv4Network(text, strict=False)
        pairs.append((int(net.network_address), int(net.netmask)))
    return pairs


class ProtocolCounter:
    """Counts what the capture streams: packets, IP bytes, and packets per protocol.

    TCP, UDP and ICMP count every packet of that transport. DNS counts UDP or TCP packets to or from
    port 53; HTTP counts TCP packets whose payload starts an HTTP/1 request or response head; TLS
    counts TCP packets whose payload starts with a TLS record header. So DNS, HTTP and TLS are
    subsets of TCP/UDP, and a TLS or HTTP body continued over several packets counts once per head.
    """

    __slots__ = ("_sink", "packets", "bytes", "counts")

    def __init__(self, sink: StreamClient[CapturedPacket]) -> None:
        self._sink = sink
        self.packets = 0
        self.bytes = 0
        self.counts = [0] * len(PROTOCOLS)

    def submit(self, item: CapturedPacket, block: bool = False) -> None:
        self.packets += 1
        self.bytes += item.size
        counts = self.counts
        proto = item.protocol
        if proto == 6:
            counts[_TCP] += 1
            payload = item.payload
            if item.local_port == 53 or item.remote_port == 53:
                counts[_DNS] += 1
            elif len(payload) >= 5:
                if 20 <= payload[0] <= 23 and payload[1] == 3:
                    counts[_TLS] += 1
                elif payload.startswith(_HTTP_STARTS):
                    counts[_HTTP] += 1
        elif proto == 17:
            counts[_UDP] += 1
            if item.local_port == 53 or item.remote_port == 53:
                counts[_DNS] += 1
        elif proto == 1:
            counts[_ICMP] += 1
        self._sink.submit(item, block)

    def stats(self) -> dict[str, int]:
        return dict(zip(PROTOCOLS, self.counts))


class CaptureRunner:
    """One capture process following the spec in `control_dir`."""

    def __init__(self, control_dir: Path) -> None:
        self.control_dir = control_dir
        self.spec_path = control_dir / SPEC_FILE
        self.status_path = control_dir / STATUS_FILE
        self.stop_requested = False

    def _spec(self) -> tuple[RunnerSpec | None, int]:
        try:
            mtime = self.spec_path.stat().st_mtime_ns
        except OSError:
            return None, 0
        data = read_json(self.spec_path)
        return (RunnerSpec.model_validate(data) if data else None), mtime

    def _write(self, spec: RunnerSpec | None, state: str, error: str | None = None, **fields: Any) -> None:
        write_json(self.status_path, {
            "generation": spec.generation if spec else 0, "state": state, "error": error, "pid": os.getpid(),
            "heartbeat": time.time(), **fields,
        })

    def run(self) -> int:
        """Follow the spec until SIGTERM; exit 1 when the capture could not run (the supervisor restarts it)."""
        while not self.stop_requested:
            spec, mtime = self._spec()
            if spec is None or not spec.running:
                self._write(spec, "idle")
                time.sleep(STATUS_INTERVAL)
                continue
            try:
                self._capture(spec, mtime)
            except (AgentError, OSError) as err:
                message = f"capture on {spec.interface} failed: {err}"
                log.error("%s", message)
                self._write(spec, "error", message)
                return EXIT_NOT_PERMITTED if "CAP_NET_RAW" in str(err) else EXIT_FAILED
        return 0

    def _capture(self, spec: RunnerSpec, mtime: int) -> None:
        config = AgentConfig(target=spec.target, server_name=spec.server_name, insecure=spec.insecure,
                             interfaces=(spec.interface,), snaplen=spec.snaplen)
        directions = DirectionResolver(infer=True, internal=parse_networks(spec.internal_networks))
        exclude = resolve_target(spec.target)
        decoder = Decoder(directions, exclude=exclude, stats=DecodeStats())
        read = (lambda name: (self.control_dir / name).read_bytes()) if not spec.insecure else (lambda name: b"")
        connection = Connection(target=spec.target, ca_pem=read(CA_FILE), cert_pem=read(CERT_FILE),
                                key_pem=read(KEY_FILE), server_name=spec.server_name, insecure=spec.insecure)
        stream: StreamClient[CapturedPacket] = StreamClient(
            "packets", connection, identity_of(spec.interface, spec.version),
            lambda stub: stub.StreamPacketBatches, wire.packet_batch, StreamTuning(flush_interval=0.2),  # type: ignore[arg-type]
        )
        counter = ProtocolCounter(stream)
        capture = LinuxCapture.open(config, decoder, exclude, rcvbuf=spec.buffer_bytes, promiscuous=spec.promiscuous)
        started = time.time()
        kernel_received = kernel_dropped = 0
        stream.start()
        log.info("capture started interface=%s promiscuous=%s %s", spec.interface, spec.promiscuous, capture.describe())
        try:
            next_status = 0.0
            while not self.stop_requested:
                capture.poll(counter, timeout=0.1)
                now = time.monotonic()
                if now < next_status:
                    continue
                next_status = now + STATUS_INTERVAL
                received, dropped = capture.kernel_stats()
                kernel_received += received
                kernel_dropped += dropped
                stats = decoder.stats
                self._write(spec, "running", startedAt=started, packetCount=counter.packets, byteCount=counter.bytes,
                            droppedCount=kernel_dropped + stream.dropped, kernelReceived=kernel_received,
                            kernelDropped=kernel_dropped, queueDropped=stream.dropped, sent=stream.sent,
                            protocolStats=counter.stats(), skipped=dict(stats.skipped))
                try:
                    if self.spec_path.stat().st_mtime_ns != mtime:
                        return  # the supervisor changed the spec: re-read it
                except OSError:
                    return
        finally:
            capture.close()
            stream.close(timeout=3.0)
            log.info("capture stopped interface=%s packets=%d sent=%d", spec.interface, counter.packets, stream.sent)


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m appliance.capture",
                                     description="The appliance's port capture (run by the appliance or sensor-capture.service).")
    parser.add_argument("--control-dir", type=Path, required=True, help="directory of spec.json and status.json")
    args = parser.parse_args(argv)
    logging.basicConfig(level=os.environ.get("SENSOR_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    runner = CaptureRunner(args.control_dir)

    def request_stop(_signum: int, _frame: object) -> None:
        runner.stop_requested = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    return runner.run()
