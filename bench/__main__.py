"""`make bench`: runs every `bench/*_bench.py` module's `main()` in turn, in one process run."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    wanted = set(argv)
    here = Path(__file__).parent
    for info in sorted(pkgutil.iter_modules([str(here)]), key=lambda m: m.name):
        if not info.name.endswith("_bench"):
            continue
        if wanted and info.name not in wanted:
            continue
        module = importlib.import_module(f"bench.{info.name}")
        print(f"== {info.name}", flush=True)
        module.main()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
