"""Stopping the agent: SIGTERM twice in a row (what a one-file binary receives) still ends it cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.agents.conftest import ROOT


@pytest.mark.skipif(os.geteuid() != 0, reason="live capture needs CAP_NET_RAW (root)")
def test_two_quick_sigterms_stop_the_agent_cleanly(tmp_path) -> None:
    log = tmp_path / "agent.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agents", "--target", "127.0.0.1:9", "--insecure", "--machine-id", "sig-test"],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while b"agent started" not in log.read_bytes() and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        proc.send_signal(signal.SIGTERM)  # the second lands while the first is being handled
        assert proc.wait(20) == 0, log.read_text()
        assert b"agent stopping" in log.read_bytes()
    finally:
        if proc.poll() is None:
            proc.kill()
