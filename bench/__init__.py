"""Benchmarks (`make bench`): one module per bench, each writing its figures as text and JSON under var/bench/."""

from __future__ import annotations

import datetime
import gc
import json
import statistics
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "var" / "bench"
# pyperf's rule: rounds whose standard deviation is over a tenth of their mean say more about the machine
# (another tenant of the host, a CPU taken away) than about the code, and their figure may not hold.
UNSTABLE_SPREAD = 0.10
# A figure that falls by more than this share of its median a round (trend) declines from round to round: what state
# left behind by earlier rounds looks like (issue 15's appliance fell 0.18, 0.13, 0.11, 0.09, 0.12: -17% a round).
DECLINE_PER_ROUND = -0.05


def spread(rounds: list[float]) -> float:
    """Standard deviation over mean of a bench's rounds (0.0 with fewer than two)."""
    return statistics.stdev(rounds) / statistics.fmean(rounds) if len(rounds) > 1 and statistics.fmean(rounds) else 0.0


def trend(rounds: list[float]) -> float:
    """How a figure moves from round to round, as a share of its median per round: the Theil-Sen slope (the median of
    the slopes between every two rounds), which one round far off the others (another tenant of the host) does not
    tip the way a least-squares line's would. 0.0 with fewer than two rounds."""
    slopes = [(rounds[j] - rounds[i]) / (j - i) for i in range(len(rounds)) for j in range(i + 1, len(rounds))]
    middle = statistics.median(rounds) if rounds else 0.0
    return statistics.median(slopes) / middle if slopes and middle else 0.0


def release_round() -> None:
    """End a round that built an appliance and called `tune_garbage_collector`: unfreeze and collect.

    `tune_garbage_collector` freezes every object alive (once per process in the appliance). A bench builds an
    appliance per round in one process, so each round froze the last one's objects too, and a stopped appliance's
    cycles were never collected: 7-14 MB more heap each round, and later rounds ran in a larger, colder heap than a
    new appliance has. After this, each round starts from what the last one left collectable."""
    gc.unfreeze()
    gc.collect()


def write_figures(name: str, lines: list[str], figures: dict[str, Any]) -> None:
    """var/bench/<name>.txt (the time, then `lines`) and <name>.json (`figures` with the same time as "measured")."""
    OUT.mkdir(parents=True, exist_ok=True)
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    (OUT / f"{name}.txt").write_text("\n".join([when, *lines]) + "\n")
    (OUT / f"{name}.json").write_text(json.dumps({"measured": when, **figures}, indent=1) + "\n")
