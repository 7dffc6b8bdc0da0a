"""Both products as shipped: the appliance and the concierge on their default ports at once, and the
docs' concierge walkthrough run twice in a row. In a network namespace of its own, so the fixed
default ports cannot clash with anything else on the machine (or another test run)."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agents.netns import Lab, lab_available

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "concierge.md"


def walkthrough() -> str:
    """The sh block of the docs' "A first session with curl"."""
    section = DOCS.read_text().split("## A first session with curl", 1)[1]
    return re.search(r"```sh\n(.*?)```", section, re.S).group(1)


@pytest.fixture
def lab() -> Iterator[Lab]:
    reason = lab_available()
    if reason:
        pytest.skip(reason)
    lab = Lab.create()
    try:
        yield lab
    finally:
        lab.close()


@pytest.mark.slow
def test_both_products_run_side_by_side_on_their_defaults_and_the_walkthrough_runs_twice(lab: Lab, tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if k not in ("PORT", "HOST", "SENSOR_ADMIN_TOKEN")}
    # The appliance's default state is the checkout's var/: keep this run's state apart (ports stay default).
    config = tmp_path / "appliance.yaml"
    config.write_text(f"paths: {{state_dir: '{tmp_path}/state', certs_dir: '{tmp_path}/certs', "
                      f"static_dir: '{tmp_path}/static'}}\n")
    appliance = lab.spawn(lab.agent_ns, sys.executable, "-m", "appliance", "--config", str(config),
                          log=tmp_path / "appliance.log", env=env)
    concierge = lab.spawn(lab.agent_ns, sys.executable, "-m", "concierge", "--seed", log=tmp_path / "concierge.log",
                          env={**env, "CONCIERGE_STATE_DIR": str(tmp_path / "concierge")})
    for port in (8080, 50051, 8090):
        lab.wait_port(lab.agent_ns, port, timeout=60)
    assert appliance.poll() is None and concierge.poll() is None, (tmp_path / "appliance.log").read_text()

    status = lab.ns(lab.agent_ns, "curl", "-sf", "--cacert", f"{tmp_path}/certs/ca.pem",
                    "https://localhost:8080/api/status").stdout
    assert '"status": "Running"' in status or '"status":"Running"' in status
    lab.ns(lab.agent_ns, "curl", "-sf", "-o", "/dev/null", "http://127.0.0.1:8090/openapi")  # raises unless 2xx

    work = tmp_path / "walkthrough"
    work.mkdir()
    script = walkthrough()
    assert "B=http://127.0.0.1:8090" in script
    for run in (1, 2):
        done = lab.ns(lab.agent_ns, "bash", "-c", f"cd {work} && {{\n{script}\n}}", check=False)
        out = done.stdout
        # The guest's stream saw the arrival, and the front desk's confirmation answered 2xx (curl -f).
        assert "event: status" in out, (run, out, done.stderr)
        assert len(re.findall(r'"status":\s*"arrived"', out)) >= 2, (run, out, done.stderr)
        assert "INVALID_TRANSITION" not in out and "curl: (22)" not in done.stderr, (run, done.stderr)
    assert appliance.poll() is None and concierge.poll() is None
    assert lab.stop(appliance) == 0
