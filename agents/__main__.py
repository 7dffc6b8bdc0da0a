"""`python -m agents` (and the frozen `sensor-agent` binary) start here."""

from __future__ import annotations

import sys

from agents.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
