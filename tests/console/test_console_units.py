"""The console's store and client unit tests (`node --test`), run from `make test` so a red store fails the suite."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

CONSOLE = Path(__file__).resolve().parents[2] / "console"


def test_console_store_unit_tests_pass() -> None:
    assert shutil.which("node"), "node is not installed: the console needs Node >= 20.19"
    assert (CONSOLE / "node_modules" / "tsx").is_dir(), "console/node_modules is missing: run `make console`"
    tests = sorted(str(p.relative_to(CONSOLE)) for p in (CONSOLE / "test").glob("*.test.ts"))
    assert {Path(t).name for t in tests} >= {"metrics.test.ts", "threats.test.ts", "capture.test.ts", "config.test.ts",
                                             "analysis.test.ts"}
    run = subprocess.run(["node", "--import", "tsx", "--test", *tests], cwd=CONSOLE, capture_output=True,
                         text=True, timeout=120)
    summary = [line for line in run.stdout.splitlines() if line.startswith("# ")]
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "# fail 0" in summary and any(line.startswith("# pass ") and line != "# pass 0" for line in summary), summary
