"""`make bench`: runs every `bench/*_bench.py` module's `main()` in turn, each in its own process
(a bench may tune process-wide state, such as the garbage collector, as the appliance does)."""

from __future__ import annotations

import pkgutil
import subprocess
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
        print(f"== {info.name}", flush=True)
        code = f"import bench.{info.name} as b; b.main()"
        if subprocess.run([sys.executable, "-c", code], cwd=here.parent).returncode != 0:
            print(f"{info.name} failed", flush=True)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
