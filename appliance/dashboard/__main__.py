"""`python -m appliance.dashboard [--config FILE]`: serve the analyst console until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

from appliance import __version__
from appliance.__main__ import wait_for_stop_signal
from appliance.config import load_settings, split_listen
from appliance.dashboard.accounts import FIRST_ADMIN, FIRST_ADMIN_FILE
from appliance.dashboard.app import CertificatesMissing, build
from appliance.errors import ApplianceError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="appliance.dashboard", description="The analyst console (HTTPS, port 3000).")
    parser.add_argument("--config", help="path to config.yaml (all defaults apply when omitted)")
    parser.add_argument("--log-level", default=os.environ.get("SENSOR_LOG_LEVEL", "INFO"))
    parser.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                        help="wait this long for the appliance's certificates (make run starts both at once)")
    parser.add_argument("--version", action="version", version=__version__)
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = load_settings(args.config)
        deadline = time.monotonic() + args.wait
        while True:
            try:
                dashboard = build(settings)
                break
            except CertificatesMissing:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.5)
        dashboard.start()
    except ApplianceError as err:
        print(f"dashboard: cannot start:\n{err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"dashboard: cannot start: {err}", file=sys.stderr)
        return 2

    def banner() -> None:  # printed once the signal handlers are in place: a stop right after it is clean
        host, _ = split_listen(settings.dashboard.listen)
        shown = "localhost" if host in ("0.0.0.0", "::", "") else host
        password_file = settings.paths.state_dir / FIRST_ADMIN_FILE
        print(f"console {__version__} running", flush=True)
        print(f"  console URL    : https://{shown}:{dashboard.port}/")
        print(f"  REST API       : {dashboard.upstream.base_url}")
        if dashboard.first_admin_password and sys.stdout.isatty():
            # Only to a person at a terminal: under systemd stdout goes to the journal, which keeps it.
            print(f"  first sign-in  : {FIRST_ADMIN} / {dashboard.first_admin_password}   (kept in {password_file}, mode 0600)")
        elif dashboard.first_admin_password:
            print(f"  first sign-in  : user {FIRST_ADMIN}, password generated into {password_file} (mode 0600)")
        if not (settings.dashboard.dist_dir / "index.html").is_file():
            print(f"  web app        : {settings.dashboard.dist_dir} is not built; run `make console`")
        sys.stdout.flush()

    signum = wait_for_stop_signal(ready=banner)
    logging.getLogger("appliance.dashboard").info("signal %d: shutting down", signum)
    dashboard.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
