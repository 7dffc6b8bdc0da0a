"""The agent's composition root: `build(config, options)` wires decoder, streams and capture."""

from __future__ import annotations

import logging
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TextIO

from agents import __version__, wire
from agents.config import AgentConfig, Identity, default_machine_id, os_name
from agents.decode import Decoder, DecodeStats, DirectionResolver
from agents.errors import ConfigError
from agents.model import CapturedPacket, ProcessEvent, ip_int
from agents.pcapfile import read_capture
from agents.stream import Connection, StreamClient, StreamTuning

log = logging.getLogger(__name__)


class PacketSink(Protocol):
    """Where decoded packets go: a stream to the appliance, or stdout for --dry-run."""

    def submit(self, item: CapturedPacket, block: bool = False) -> None: ...


class PrintSink:
    """`--dry-run`: one line per decoded packet on stdout, nothing sent."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self.submitted = 0

    def submit(self, item: CapturedPacket, block: bool = False) -> None:
        self.submitted += 1
        self._out.write(item.describe() + "\n")


@dataclass(frozen=True, slots=True)
class RunOptions:
    """What this invocation does, beyond the configuration."""

    pcap: Path | None = None
    dry_run: bool = False
    local_ips: tuple[str, ...] = ()
    stats_interval: float = 60.0


@dataclass
class Agent:
    """A wired agent; `replay()` or `run()` it."""

    config: AgentConfig
    options: RunOptions
    identity: Identity
    decoder: Decoder
    sink: PacketSink
    packets: StreamClient[CapturedPacket] | None
    processes: StreamClient[ProcessEvent] | None = None
    stop: threading.Event = field(default_factory=threading.Event)

    def replay(self) -> dict[str, object]:
        """Decode a capture file with its original timestamps and send every packet; a summary.

        `complete` is true only when every packet went out and the appliance acknowledged the stream;
        on a failure the summary carries `failure` (the gRPC status) and `advice` (what to do).
        """
        assert self.options.pcap is not None
        frames = 0
        submit = self.sink.submit
        decode = self.decoder.decode
        packets = self.packets
        if packets is not None:
            packets.start()
        for frame in read_capture(self.options.pcap):
            if packets is not None and packets.stopped:
                break  # the stream failed: the rest of the file would go nowhere
            frames += 1
            packet = decode(frame.linktype, frame.data, frame.timestamp_ns)
            if packet is not None:
                submit(packet, True)
        summary: dict[str, object] = {"file": str(self.options.pcap), "frames": frames, **self.decoder.stats.as_dict()}
        if packets is not None:
            closed = packets.close(timeout=60.0)
            summary["complete"] = closed and packets.failure is None and packets.last_reply is not None
            summary.update(packets.stats())
            if packets.last_reply is not None:
                received, rejected, agent_id = packets.last_reply
                summary.update(appliance_received=received, appliance_rejected=rejected, agent_id=agent_id)
            if packets.failure is not None:
                summary.update(failure=packets.failure.code, detail=packets.failure.detail,
                               advice=packets.failure.sentence(self.config.target))
        return summary

    def run(self) -> None:
        """Capture live until `stop` is set."""
        from agents.capture import open_capture

        capture = open_capture(self.config, self.decoder, self.exclude_targets())
        if self.packets is not None:
            self.packets.start()
        watcher = None
        if self.processes is not None:
            from agents.processes import ProcessWatcher

            watcher = ProcessWatcher(self.processes, self.config.process_interval, self.stop)
            self.processes.start()
            threading.Thread(target=watcher.run, name="processes", daemon=True).start()
        log.info("agent started version=%s os=%s machine_id=%s capture=%s", __version__, self.identity.os,
                 self.identity.machine_id, capture.describe())
        next_stats = time.monotonic() + self.options.stats_interval
        try:
            while not self.stop.is_set():
                capture.poll(self.sink, timeout=0.25)
                if time.monotonic() >= next_stats:
                    next_stats = time.monotonic() + self.options.stats_interval
                    log.info("agent stats %s %s", self.decoder.stats.as_dict(),
                             self.packets.stats() if self.packets else {})
        finally:
            log.info("agent stopping %s %s", self.decoder.stats.as_dict(), self.packets.stats() if self.packets else {})
            capture.close()
            # Bounded: a service manager waits for us, and what is still queued is lost either way.
            if self.processes is not None:
                self.processes.close(timeout=1.0)
            if self.packets is not None:
                self.packets.close(timeout=3.0)

    def exclude_targets(self) -> list[tuple[int, int]]:
        """(ip, port) of the appliance, so the agent never captures its own stream."""
        return resolve_target(self.config.target)


def resolve_target(target: str) -> list[tuple[int, int]]:
    if not target:
        return []
    host, _, port = target.rpartition(":")
    try:
        infos = socket.getaddrinfo(host.strip("[]"), int(port), socket.AF_INET, socket.SOCK_STREAM)
    except OSError:
        log.warning("cannot resolve target %s; its traffic is not excluded from capture", target)
        return []
    return sorted({(ip_int(str(info[4][0])), int(port)) for info in infos})


def _read_pem(path: str, key: str) -> bytes:
    if not path:
        return b""
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise ConfigError(f"{key}: cannot read {path}: {err.strerror}") from None


def _rpc_batches(stub: wire.Stub) -> object:
    return stub.StreamPacketBatches


def _rpc_processes(stub: wire.Stub) -> object:
    return stub.StreamProcesses


def build(config: AgentConfig, options: RunOptions, out: TextIO = sys.stdout) -> Agent:
    """Wire one agent from its configuration (the only place objects are constructed)."""
    identity = Identity(
        machine_id=config.machine_id or default_machine_id(),
        hostname=config.hostname or socket.gethostname(),
        os=os_name(),
        version=__version__,
    )
    if options.pcap is not None:
        try:
            local = [ip_int(ip) for ip in options.local_ips]
        except ValueError as err:
            raise ConfigError(f"--local-ip: {err}") from None
        directions = DirectionResolver(local, infer=not local)
    else:
        directions = DirectionResolver()
    exclude = [] if options.pcap is not None else resolve_target(config.target)
    decoder = Decoder(directions, exclude=exclude, stats=DecodeStats())
    if options.dry_run:
        return Agent(config, options, identity, decoder, PrintSink(out), None)
    if not config.target:
        raise ConfigError("target: no appliance address (set `target` in the config file or pass --target)")
    if not config.insecure and not (config.ca_cert and config.cert and config.key):
        raise ConfigError("ca_cert, cert, key: mTLS needs all three (or set `insecure: true`)")
    connection = Connection(
        target=config.target,
        ca_pem=_read_pem(config.ca_cert, "ca_cert"),
        cert_pem=_read_pem(config.cert, "cert"),
        key_pem=_read_pem(config.key, "key"),
        server_name=config.server_name,
        insecure=config.insecure,
    )
    tuning = StreamTuning(config.batch_size, config.flush_interval, config.queue_size,
                          config.backoff_initial, config.backoff_max)
    enrich = None
    if options.pcap is None and sys.platform.startswith("linux"):
        from agents.attribution import SocketOwners

        enrich = SocketOwners().enrich
    # A replay is one-shot: it stops at the first failure so the command can say so and exit non-zero.
    packets: StreamClient[CapturedPacket] = StreamClient(
        "packets", connection, identity, _rpc_batches, wire.packet_batch, tuning, enrich=enrich,  # type: ignore[arg-type]
        fail_fast=options.pcap is not None)
    processes = None
    if options.pcap is None and config.processes and sys.platform.startswith("linux"):
        processes = StreamClient(
            "processes", connection, identity, _rpc_processes, wire.process_events,  # type: ignore[arg-type]
            StreamTuning(64, 1.0, 10_000, config.backoff_initial, config.backoff_max))
    return Agent(config, options, identity, decoder, packets, packets, processes)

