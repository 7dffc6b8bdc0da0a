"""appliance.cpus: the split between the server and its analysis process, and pinning every thread of a process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from appliance.cpus import pin_process, split_cpus


def test_analysis_gets_the_last_usable_cpu_and_the_server_the_others() -> None:
    assert split_cpus({0, 1}) == ({0}, {1})
    assert split_cpus({0, 2, 5, 7}) == ({0, 2, 5}, {7})  # a cpuset with holes (a container, a unit's CPUAffinity=)
    assert split_cpus({3}) is None and split_cpus(set()) is None  # one CPU: nothing to split


def thread_cpus(pid: int) -> list[set[int]]:
    """The CPU set of every thread of process `pid`."""
    return [os.sched_getaffinity(int(tid)) for tid in os.listdir(f"/proc/{pid}/task")]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable CPUs")
def test_every_thread_of_a_process_is_pinned_and_threads_it_starts_later_inherit() -> None:
    usable = os.sched_getaffinity(0)
    one = {min(usable)}
    code = ("import sys, threading, time\n"
            "for _ in range(3): threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
            "print('up', flush=True); sys.stdin.readline()\n"
            "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
            "print('more', flush=True); sys.stdin.readline()\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline() == "up\n"
        assert len(thread_cpus(child.pid)) == 4 and all(c == usable for c in thread_cpus(child.pid))
        pin_process(child.pid, one)
        assert all(c == one for c in thread_cpus(child.pid))
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline() == "more\n"
        cpus = thread_cpus(child.pid)
        assert len(cpus) == 5 and all(c == one for c in cpus)  # the new thread inherited the set
    finally:
        child.kill()
        child.wait()


def test_pinning_a_process_that_is_gone_says_so() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    with pytest.raises(OSError):
        pin_process(child.pid, os.sched_getaffinity(0))
