"""`python -m appliance [--config FILE]`: run the appliance until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from collections.abc import Callable

from appliance import __version__
from appliance.app import ADMIN_TOKEN_FILE, build, tune_garbage_collector
from appliance.config import load_settings
from appliance.errors import ApplianceError


def _notify(state: str) -> None:
    """Tell systemd about readiness/stopping when it supervises us (Type=notify)."""
    if not os.environ.get("NOTIFY_SOCKET"):
        return
    try:
        from systemd import daemon  # type: ignore[attr-defined]
    except ImportError:  # systemd-python not installed: run without notifications
        return
    daemon.notify(state)


def wait_for_stop_signal(ready: Callable[[], None] | None = None, watchdog: Callable[[], None] | None = None) -> int:
    """Block until SIGTERM or SIGINT; return which (shared by the appliance and the dashboard).

    `ready` runs once the handlers are in place, so a signal sent on readiness is never the default kill.
    `watchdog` runs every WatchdogSec/2 when systemd supervises with WatchdogSec= (it sets WATCHDOG_USEC and
    restarts a process whose pings stop).
    """
    # The handler only appends: taking a lock (Event.set, logging) inside a signal handler deadlocks
    # when a second signal arrives while the first handler holds it (a double Ctrl-C, say).
    requested: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: requested.append(signum))
    signal.signal(signal.SIGINT, lambda signum, _frame: requested.append(signum))
    if ready is not None:
        ready()
    watchdog_every = int(os.environ.get("WATCHDOG_USEC", "0") or 0) / 2e6 if watchdog is not None else 0
    next_ping = time.monotonic()
    while not requested:
        if watchdog is not None and watchdog_every and time.monotonic() >= next_ping:
            watchdog()
            next_ping = time.monotonic() + watchdog_every
        time.sleep(0.2)
    return requested[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="appliance", description="Network security appliance (detection server).")
    parser.add_argument("--config", help="path to config.yaml (all defaults apply when omitted)")
    parser.add_argument("--log-level", default=os.environ.get("SENSOR_LOG_LEVEL", "INFO"))
    parser.add_argument("--version", action="version", version=__version__)
    parser.add_argument("--print-static-dir", action="store_true",
                        help="print the resolved paths.static_dir and exit (`make run` places the Linux agent there)")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.print_static_dir:
        try:
            print(load_settings(args.config).paths.static_dir)
        except ApplianceError as err:
            print(f"appliance: cannot start:\n{err}", file=sys.stderr)
            return 2
        return 0
    try:
        settings = load_settings(args.config)
        if settings.cluster.role == "analyzer":  # no gRPC, no REST: analysis of leased partitions (appliance/cluster)
            from appliance.cluster.analyzer import run_analyzer

            return run_analyzer(settings)
        appliance = build(settings)
        appliance.start()
        tune_garbage_collector()
        appliance.pin_cpus()
    except ApplianceError as err:
        print(f"appliance: cannot start:\n{err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"appliance: cannot start: {err}", file=sys.stderr)
        return 2

    scheme = "https" if settings.rest.tls else "http"
    print(f"appliance {__version__} running", flush=True)
    print(f"  gRPC ingestion : port {appliance.grpc_port} ({'mutual TLS' if settings.grpc.tls else 'PLAINTEXT'})")
    print(f"  REST API       : {scheme}://localhost:{appliance.rest_port}/api/status")
    # The SHA-256 of the DER certificate (what the enrollment command pins), not of the PEM file:
    # shown the way openssl shows it, with the command that prints the same line.
    der_sha256 = ":".join(f"{b:02X}" for b in bytes.fromhex(appliance.ca.ca_fingerprint))
    print(f"  CA certificate : {appliance.ca.ca_cert_path}")
    print(f"  CA fingerprint : sha256 Fingerprint={der_sha256}   (SHA-256 of the DER certificate, not of the .pem file)")
    print(f"  check it with  : openssl x509 -in {appliance.ca.ca_cert_path} -noout -fingerprint -sha256")
    if appliance.admin_token_created and sys.stdout.isatty():
        # Only to a person at a terminal: under systemd stdout goes to the journal, which keeps it.
        print(f"  admin token    : {appliance.admin_token}   (shown once; kept in {settings.paths.state_dir / ADMIN_TOKEN_FILE}, mode 0600)")
    elif appliance.admin_token_created:
        print(f"  admin token    : generated into {settings.paths.state_dir / ADMIN_TOKEN_FILE} (mode 0600)")
    elif os.environ.get("SENSOR_ADMIN_TOKEN"):
        print("  admin token    : from SENSOR_ADMIN_TOKEN")
    else:
        print(f"  admin token    : in {settings.paths.state_dir / ADMIN_TOKEN_FILE}")
    print(f"  authenticate   : curl --cacert {appliance.ca.ca_cert_path} -H \"Authorization: Bearer $TOKEN\" "
          f"{scheme}://localhost:{appliance.rest_port}/api/v1/metrics", flush=True)

    signum = wait_for_stop_signal(ready=lambda: _notify("READY=1"), watchdog=lambda: _notify("WATCHDOG=1"))
    logging.getLogger("appliance").info("signal %d: shutting down", signum)
    _notify("STOPPING=1")
    appliance.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
