"""`python -m concierge [--seed] [--port N]`: serve the API with settings from the environment."""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from concierge.app import build
from concierge.errors import ConfigError
from concierge.settings import Settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="concierge", description="Hotel concierge platform HTTP API")
    parser.add_argument("--seed", action="store_true", help="create the demo hotel (idempotent) and print its credentials")
    parser.add_argument("--port", type=int, default=None, help="override PORT")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        settings = Settings.from_env()
    except ConfigError as err:
        print(f"concierge: {err}", file=sys.stderr)
        return 2
    if args.port is not None:
        settings = settings.with_(port=args.port)
    concierge = build(settings)
    if args.seed:
        from concierge.seed import seed_demo

        credentials = seed_demo(concierge)
        print("\nDemo hotel ready. Sign in with:", flush=True)
        for role, (email, password) in credentials.items():
            print(f"  {role:<8} {email:<32} {password}", flush=True)
    port = concierge.start()
    print(f"\nConcierge API on http://{settings.host}:{port}  (docs: http://{settings.host}:{port}/openapi)", flush=True)
    stop = {"now": False}

    def on_signal(signum: int, frame: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        while not stop["now"]:
            signal.pause() if hasattr(signal, "pause") else None
    finally:
        concierge.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
