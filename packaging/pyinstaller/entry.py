"""Entry point frozen by PyInstaller: the same as `python -m agents`."""

import sys

from agents.cli import main

sys.exit(main(sys.argv[1:]))
