"""The memory the analysis side touches at start-up (appliance/analysis/memory.py, native memory_reserve.h).

The reserve changes the process's allocator for good, so each case runs in a child interpreter of its own; what it
promises is measured there: page faults while Python's objects grow, and arenas given back and taken again.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from appliance.analysis.memory import reserve

# Grows Python's objects by about 60 MB (small tuples of new ints and strings: obmalloc arenas), counting the page
# faults of that growth; then frees them all and grows them again (arenas Python gave back, taken again).
CHILD = r"""
import json, resource, sys
from appliance.analysis.memory import reserve
from appliance.native import dpi
mb = int(sys.argv[1])
reserved = reserve(mb) if mb else (0, 0)
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
def grow():
    return [(i, str(i) * 3, (i, i + 1)) for i in range(300_000)]
before = faults()
objects = grow()
first = faults() - before
del objects
before = faults()
objects = grow()
again = faults() - before
out = {"reserved": reserved, "first": first, "again": again}
if len(sys.argv) > 2:
    try:
        dpi.reserve_memory(1 << 20, 0)
    except RuntimeError as err:
        out["second_call"] = str(err)
print(json.dumps(out))
"""


def child(prefault_mb: int, *extra: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", CHILD, str(prefault_mb), *extra], capture_output=True, text=True,
                          timeout=120, check=True)
    return json.loads(done.stdout)


def test_objects_grow_into_the_reserve_without_page_faults() -> None:
    plain, reserved = child(0), child(192)
    pool, heap = reserved["reserved"]
    assert pool == 128 << 20 and heap == 64 << 20  # two thirds arenas (whole MiB), a third heap
    # Without it, each new 4 KiB page faults on its first touch: about 60 MB of objects, some 15,000 pages.
    assert plain["first"] > 8_000
    assert reserved["first"] < plain["first"] / 10


def test_arenas_python_gives_back_stay_resident_for_the_next_growth() -> None:
    plain, reserved = child(0), child(192)
    assert plain["again"] > 2_000  # freed arenas were unmapped: growing again faults again
    assert reserved["again"] < plain["again"] / 10


def test_beyond_the_reserve_arenas_come_from_the_system_as_before() -> None:
    small = child(6)  # a 4 MiB pool: the rest of the growth is mapped and faulted page by page, and still works
    assert small["reserved"] == [4 << 20, 2 << 20]
    assert small["first"] > 8_000


def test_one_reserve_per_process() -> None:
    assert child(3, "twice")["second_call"] == "reserve_memory: already called in this process"


def test_nothing_is_reserved_at_zero() -> None:
    assert reserve(0) == (0, 0)  # in this process: with 0 the native call is never made


@pytest.mark.parametrize("args", [(-1, 0), (0, -1)])
def test_negative_sizes_are_refused(args: tuple[int, int]) -> None:
    from appliance.native import dpi

    with pytest.raises(ValueError):
        dpi.reserve_memory(*args)


def test_a_reserve_over_a_quarter_of_the_available_memory_is_cut_to_that_quarter() -> None:
    """A box smaller than the config assumed: 40 MiB available (as /proc/meminfo would say) gets 10 MiB reserved."""
    script = ("import json; from appliance.analysis import memory; memory.available_mb = lambda: 40; "
              "print(json.dumps(memory.reserve(128)))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(done.stdout) == [6 << 20, 3 << 20]  # two thirds of 10 MiB in whole MiB, and the heap's third
    assert "over a quarter of the 40 MiB available: 10 MiB reserved" in done.stderr


def test_with_almost_nothing_available_nothing_is_reserved(monkeypatch: pytest.MonkeyPatch) -> None:
    from appliance.analysis import memory

    monkeypatch.setattr(memory, "available_mb", lambda: 3)
    assert reserve(128) == (0, 0)  # a quarter of 3 MiB is no whole MiB: the native call is never made


def test_the_available_memory_is_read_from_meminfo() -> None:
    from appliance.analysis import memory

    available = memory.available_mb()
    assert available is not None and 0 < available < 1 << 30
