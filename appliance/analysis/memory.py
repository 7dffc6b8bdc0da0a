"""Memory the analysis side touches at start-up, so that its state grows without page faults while flows wait.

`analysis.memory_prefault_mb` of it: two thirds as a pool for Python's object arenas, a third for the C heap
(appliance/native/memory_reserve.h says how, and why: a new agent's state is new memory, and each page's first
touch cost 1.7-2.8 us on this kind of virtual machine, 2-5 ms of the analysis process's ~60 a pass of the bench
corpus). Called once per process, first thing, by the analysis process and by a cluster analyzer.
"""

from __future__ import annotations

import logging
import time

from appliance.native import dpi

log = logging.getLogger(__name__)

_MB = 1 << 20
MAX_SHARE_OF_AVAILABLE = 4  # never more than a quarter of the memory available when the process starts


def available_mb() -> int | None:
    """MemAvailable from /proc/meminfo, in MiB (None where it cannot be read)."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def reserve(prefault_mb: int) -> tuple[int, int]:
    """Touch `prefault_mb` MiB now (0: nothing); (arena pool bytes, heap bytes) reserved, (0, 0) with a warning when
    the system refused the mapping (analysis runs as well without it). RuntimeError when this process has reserved
    already. The heap part serves the calling thread's malloc arena: call it from the thread that analyses."""
    if prefault_mb <= 0:
        return (0, 0)
    available = available_mb()
    if available is not None and prefault_mb > available // MAX_SHARE_OF_AVAILABLE:
        # A box smaller than the config assumed: touching it all would only push other memory out.
        log.warning("analysis.memory_prefault_mb %d is over a quarter of the %d MiB available: %d MiB reserved",
                    prefault_mb, available, available // MAX_SHARE_OF_AVAILABLE)
        prefault_mb = available // MAX_SHARE_OF_AVAILABLE
        if prefault_mb <= 0:
            return (0, 0)
    arenas = prefault_mb * _MB * 2 // 3
    started = time.monotonic()
    try:
        pool, heap = dpi.reserve_memory(arenas, prefault_mb * _MB - arenas)
    except OSError as err:
        log.warning("analysis.memory_prefault_mb %d not reserved: %s", prefault_mb, err)
        return (0, 0)
    log.info("memory reserved: %d MiB of object arenas, %d MiB of heap, in %.0f ms", pool // _MB, heap // _MB,
             (time.monotonic() - started) * 1e3)
    return (pool, heap)
