"""Which CPUs the server and its analysis process run on (`analysis.pin_cpus`).

Measured on the 2-core bench machine (2026-11-24, bench/pipeline_bench.py): with the kernel free to
place them, the server's threads (gRPC's, the ingest handlers, the sender to analysis) pass the
interpreter lock to each other across both cores, each hand-off waking an idle core, and they share
those cores with the analysis process. With the analysis process on a CPU of its own and the server's
threads on the others, the corpus until every flow is analysed went from 512,000 to 706,000 packets/s
(medians of 5, interleaved rounds). `sched_setaffinity` is per thread on Linux: a process is pinned by
pinning each of its threads; threads started later inherit their creator's set.
"""

from __future__ import annotations

import os

# Passes over a process's threads: a thread that was not yet pinned may start another between the
# listing and the pinning; the next pass catches it.
_PASSES = 3


def split_cpus(usable: set[int]) -> tuple[set[int], set[int]] | None:
    """(the server's CPUs, the analysis process's): the last usable CPU for analysis (one interpreter,
    one core is all it can use), the others for the server; None with fewer than two."""
    if len(usable) < 2:
        return None
    last = max(usable)
    return usable - {last}, {last}


def pin_process(pid: int, cpus: set[int]) -> None:
    """Every thread of process `pid` (0: this one) on `cpus`. OSError when it is not allowed (a system
    call filter) or the process is gone; a thread that ends meanwhile is skipped."""
    tasks = f"/proc/{pid or 'self'}/task"
    done: set[int] = set()
    for _ in range(_PASSES):
        tids = {int(t) for t in os.listdir(tasks)} - done
        if not tids:
            return
        for tid in tids:
            try:
                os.sched_setaffinity(tid, cpus)
            except ProcessLookupError:  # the thread ended
                pass
        done |= tids

