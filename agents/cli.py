"""Command line of the agent: flags override the configuration file written at enrollment."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from agents import __version__
from agents.agent import RunOptions, build
from agents.config import DEFAULT_CONFIG_PATHS, load_config
from agents.errors import AgentError
from agents.stream import StreamFailure

log = logging.getLogger("agents")

# Exit codes (docs/agents.md): scripts and service managers can tell a refusal from a typo.
EXIT_OK = 0
EXIT_INCOMPLETE = 1      # a replay did not deliver every packet (stream error, appliance unreachable)
EXIT_CONFIG = 2          # bad flag or configuration, unreadable file
EXIT_REFUSED = 3         # the appliance refused this agent for good (revoked or rebound certificate)


def parser() -> argparse.ArgumentParser:
    default_config = DEFAULT_CONFIG_PATHS.get(sys.platform, DEFAULT_CONFIG_PATHS["linux"])
    p = argparse.ArgumentParser(
        prog="sensor-agent",
        description="Thin sensor agent: captures this host's IPv4 traffic, decodes it and streams it to the "
                    "appliance over mTLS gRPC. It does no analysis.",
    )
    p.add_argument("--version", action="store_true", help="print the agent version and exit")
    p.add_argument("--config", type=Path, default=None,
                   help=f"configuration file written by enrollment (default: {default_config} when it exists)")
    p.add_argument("--target", help="appliance gRPC address host:port (config key `target`)")
    p.add_argument("--ca-cert", help="PEM file of the CA that signed the appliance (config `ca_cert`)")
    p.add_argument("--cert", help="PEM file of this agent's client certificate (config `cert`)")
    p.add_argument("--key", help="PEM file of its private key (config `key`)")
    p.add_argument("--server-name", help="TLS name to expect from the appliance when --target is an address "
                                         "not in its certificate (config `server_name`)")
    p.add_argument("--insecure", action="store_true", default=None,
                   help="plaintext gRPC, only for appliances run with grpc.tls: false (config `insecure`)")
    p.add_argument("--machine-id", help="stable machine id sent as x-machine-id (default: /etc/machine-id)")
    p.add_argument("--hostname", help="host name sent as x-agent-hostname (default: this host's name)")
    p.add_argument("--interface", "-i", action="append", dest="interfaces",
                   help="capture on this interface; repeat for several (default: all but loopback)")
    p.add_argument("--snaplen", type=int, help="bytes kept of each frame (default 2048)")
    p.add_argument("--batch-size", type=int, help="packets per batch sent (default 256)")
    p.add_argument("--flush-interval", type=float, help="seconds a partial batch may wait (default 0.5)")
    p.add_argument("--queue-size", type=int, help="packets buffered while the appliance is away, oldest "
                                                  "dropped first (default 50000)")
    p.add_argument("--no-processes", dest="processes", action="store_false", default=None,
                   help="do not stream process start/exit events")
    p.add_argument("--pcap", type=Path, help="replay this capture file (pcap or pcapng) with its original "
                                             "timestamps instead of capturing live, then exit")
    p.add_argument("--local-ip", action="append", default=[],
                   help="with --pcap: an address of the captured host (repeatable); without it the "
                        "initiator of each conversation is taken as local")
    p.add_argument("--dry-run", action="store_true", help="print decoded packets instead of sending them")
    p.add_argument("--service", action="store_true",
                   help="Windows: run under the service control manager, configured from the registry")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if args.version:
        print(f"sensor-agent {__version__}")
        return 0
    if args.service:
        if sys.platform != "win32":
            print("sensor-agent: --service is for Windows; use the systemd unit or launchd plist", file=sys.stderr)
            return 2
        from agents.windows_service import run_service  # pragma: no cover - Windows only

        return run_service()  # pragma: no cover
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    config_path = args.config
    if config_path is None:
        default = DEFAULT_CONFIG_PATHS.get(sys.platform)
        if default is not None and default.exists() and not (args.pcap and args.dry_run):
            config_path = default
    overrides = {
        "target": args.target, "ca_cert": args.ca_cert, "cert": args.cert, "key": args.key,
        "server_name": args.server_name, "insecure": args.insecure, "machine_id": args.machine_id,
        "hostname": args.hostname, "snaplen": args.snaplen, "batch_size": args.batch_size,
        "flush_interval": args.flush_interval, "queue_size": args.queue_size, "processes": args.processes,
        "interfaces": ",".join(args.interfaces) if args.interfaces else None,
    }
    try:
        config = load_config(config_path, overrides)
        options = RunOptions(pcap=args.pcap, dry_run=args.dry_run, local_ips=tuple(args.local_ip))
        agent = build(config, options)
        if options.pcap is not None:
            summary = agent.replay()
            # The summary goes to stdout when sending, to stderr under --dry-run (stdout holds the packets).
            print(json.dumps(summary, sort_keys=True), file=sys.stderr if options.dry_run else sys.stdout)
            return _replay_outcome(summary, agent.packets.failure if agent.packets else None)
        requested: list[int] = []
        for signum in (signal.SIGINT, signal.SIGTERM):
            # Only append: a handler that took a lock (Event.set does) deadlocks when a second signal
            # lands while the first is still inside it, and a one-file binary receives SIGTERM twice
            # (from the sender and forwarded by its bootloader).
            signal.signal(signum, lambda signum, _frame: requested.append(signum))
        return _supervise(agent.run, agent.stop, requested)
    except AgentError as err:
        print(f"sensor-agent: {err}", file=sys.stderr)
        return EXIT_CONFIG


def _replay_outcome(summary: dict[str, object], failure: StreamFailure | None) -> int:
    """The exit code of a replay, with one sentence on stderr whenever it did not do its job."""
    if summary.get("complete", True):
        return EXIT_OK
    if failure is not None:
        print(f"sensor-agent: the import failed: {summary['advice']}", file=sys.stderr)
        return EXIT_REFUSED if failure.permanent else EXIT_INCOMPLETE
    print(f"sensor-agent: the import is incomplete: {summary.get('queued', 0)} packets were still queued when the "
          "60 s to finish ran out; the appliance is overloaded or the network too slow. Run the replay again.",
          file=sys.stderr)
    return EXIT_INCOMPLETE


# How long the capture may take to wind down after a stop request (its own flushes are bounded
# by about 4 s) before the process exits regardless: a service manager is waiting.
_STOP_GRACE_S = 8.0


def _supervise(run: Callable[[], None], stop: threading.Event, requested: list[int]) -> int:
    """Run the capture on a worker thread while the main thread only waits for a stop request.

    Python runs signal handlers on the main thread, between bytecodes: if the main thread were the
    capture loop and sat in a blocking system call (a netlink address refresh, say) when SIGTERM
    arrived on another thread, the handler would wait for that call. A main thread that only
    sleeps notices the signal handlers' `requested` within a fraction of a second, every time,
    and sets `stop` itself, outside any handler.
    """
    failure: list[BaseException] = []

    def body() -> None:
        try:
            run()
        except BaseException as err:  # handed to the main thread, which reports it as before
            failure.append(err)

    worker = threading.Thread(target=body, name="capture", daemon=True)
    worker.start()
    while worker.is_alive() and not requested and not stop.is_set():
        time.sleep(0.2)
    stop.set()
    worker.join(_STOP_GRACE_S)
    if worker.is_alive():
        log.warning("capture did not stop within %.0f s of the stop request; exiting anyway", _STOP_GRACE_S)
        logging.shutdown()
        os._exit(0)
    if failure:
        raise failure[0]
    return 0
