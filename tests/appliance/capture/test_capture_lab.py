"""The appliance captures a mirror port itself, in network namespaces the tests create (slow).

A lab (tests/agents/netns.py) with the "inside" host in the agent namespace and the "outside"
servers (dnsmasq, HTTP, iodined, ptunnel-ng) in the peer namespace; their link is mirrored onto the
root-side veth, where the appliance's capture process listens. `capture.internal_networks` names
the inside host, so its side of every conversation is the local one.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.agents.netns import Lab, lab_available
from tests.agents.tunnels import start_tunnel_servers, tunnel_round
from tests.appliance.capture.mirror import mirror_link_onto_uplink, sent_by_protocol, snmp
from tests.conftest import RunningAppliance, start_appliance
from tests.polling import wait_for

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
TRAFFIC = ROOT / "tests" / "agents" / "lab_traffic.py"
PYTHON = sys.executable
SHORT_TIMEOUTS = {"udp_idle": 3.0, "dns_idle": 3.0, "icmp_idle": 3.0, "tcp_idle": 3.0}
UDP_SINK = "import socket,sys\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\ns.bind((sys.argv[1],9999))\nwhile True: s.recv(4096)"


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    reason = lab_available()
    if reason:
        pytest.skip(reason)
    lab = Lab.create()
    try:
        mirror_link_onto_uplink(lab)
        yield lab
    finally:
        lab.close()


def capture_appliance(lab: Lab, tmp: Path) -> RunningAppliance:
    inside, _ = lab.link
    return start_appliance(tmp, capture={"internal_networks": [f"{inside}/32"], "restart_backoff_initial": 0.5},
                           analysis={"flow_timeouts": SHORT_TIMEOUTS, "sweep_interval": 0.5})


def status_of(running: RunningAppliance) -> dict[str, Any]:
    status, body = running.rest.get("/api/v1/capture")
    assert status == 200, body
    return dict(body)


def settled(running: RunningAppliance) -> dict[str, Any]:
    """The capture's status once its packet counter has not moved for a second (status files: 2 per second)."""
    last = status_of(running)
    stable_since = time.monotonic()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        time.sleep(0.3)
        now = status_of(running)
        if now["packetCount"] != last["packetCount"]:
            stable_since = time.monotonic()
        elif time.monotonic() - stable_since > 1.2:
            return now
        last = now
    raise AssertionError(f"the capture counters never settled: {last}")


def start_capture(running: RunningAppliance, lab: Lab, **body: Any) -> dict[str, Any]:
    status, reply = running.rest.post("/api/v1/capture/start", {"interface": lab.root_if, **body})
    assert status == 200, reply
    assert reply["status"] == "running" and reply["interface"] == lab.root_if
    # Running once the process has reported (its status file names its pid and counters).
    assert wait_for(lambda: status_of(running)["pid"] and status_of(running)["status"] == "running", 30)
    assert wait_for(lambda: "startedAt" in _status_file(running), 30), _status_file(running)
    return reply


def _status_file(running: RunningAppliance) -> dict[str, Any]:
    try:
        return dict(json.loads((running.app.settings.paths.state_dir / "capture" / "status.json").read_text()))
    except (OSError, ValueError):
        return {}


def test_a_mirror_port_is_captured_counted_analysed_restarted_and_resumed(lab: Lab, tmp_path: Path) -> None:
    inside, outside = lab.link
    running = capture_appliance(lab, tmp_path)
    try:
        status, listed = running.rest.get("/api/v1/capture/interfaces")
        port = {i["name"]: i for i in listed["interfaces"]}[lab.root_if]
        assert port["up"] is True and port["mac"] and port["promiscuous"] is False
        assert {"family": "ipv4", "address": lab.uplink[0], "prefixlen": 24} in port["addresses"]

        reply = start_capture(running, lab, promiscuous=True, snaplen=4096, bufferSize=8)
        assert reply["promiscuous"] is True and reply["snaplen"] == 4096 and reply["autoStart"] is True
        # The kernel holds the promiscuous membership while the socket is open.
        assert wait_for(lambda: {i["name"]: i for i in running.rest.get("/api/v1/capture/interfaces")[1]["interfaces"]}
                        [lab.root_if]["promiscuous"], 30)
        again, body = running.rest.post("/api/v1/capture/start", {"interface": lab.root_if})
        assert again == 409 and body["code"] == "ALREADY_RUNNING" and lab.root_if in body["error"]

        # Known UDP, ICMP and DNS traffic: every count and byte is predicted from what was sent.
        lab.spawn(lab.peer_ns, PYTHON, "-c", UDP_SINK, outside)
        lab.spawn(lab.peer_ns, "dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv", "--no-hosts",
                  f"--listen-address={outside}", "--bind-interfaces", f"--address=/lab.test/{outside}", "--user=root",
                  "--pid-file=")
        lab.wait_port(lab.peer_ns, 53, "udp")
        lab.wait_port(lab.peer_ns, 9999, "udp")
        before, kernel_before = settled(running), snmp(lab)
        burst = json.loads(lab.ns(lab.agent_ns, PYTHON, str(TRAFFIC), "burst", outside, "9999", "200").stdout)
        ping = json.loads(lab.ns(lab.agent_ns, PYTHON, str(TRAFFIC), "icmp", outside, "5").stdout)
        queries = [json.loads(lab.ns(lab.agent_ns, PYTHON, str(TRAFFIC), "dns", outside, f"n{i}.lab.test").stdout)
                   for i in range(3)]
        # A second without movement is not enough on a loaded machine: first wait until the capture has counted
        # as many packets as the kernel sent, then settle (any extra would still show in the exact checks below).
        on_the_wire = sum(sent_by_protocol(kernel_before, snmp(lab)).values())
        assert wait_for(lambda: status_of(running)["packetCount"] - before["packetCount"] >= on_the_wire, 30), \
            (on_the_wire, status_of(running))
        after, kernel_after = settled(running), snmp(lab)
        assert burst["sent"] == 200 and ping["replies"] == 5
        sent = sent_by_protocol(kernel_before, kernel_after)
        assert sent == {"TCP": 0, "UDP": 200 + 3 * 2, "ICMP": 10}
        stats = {p: after["protocolStats"][p] - before["protocolStats"][p] for p in after["protocolStats"]}
        assert stats == {**sent, "DNS": 6, "HTTP": 0, "TLS": 0}
        assert after["packetCount"] - before["packetCount"] == 216
        dns_bytes = sum(q["query"] + q["answer"] + 2 * 28 for q in queries)
        assert after["byteCount"] - before["byteCount"] == 200 * 128 + 10 * ping["size"] + dns_bytes
        assert after["droppedCount"] == 0

        # TCP: an HTTP GET (request head, response head, then the body in its own segment).
        work = tmp_path / "tls"
        work.mkdir()
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=lab.test",
                        "-keyout", str(work / "k.pem"), "-out", str(work / "c.pem")], check=True, capture_output=True)
        lab.spawn(lab.peer_ns, PYTHON, str(TRAFFIC), "serve", outside, str(work / "c.pem"), str(work / "k.pem"))
        lab.wait_port(lab.peer_ns, 8080)
        lab.wait_port(lab.peer_ns, 8443)
        before, kernel_before = settled(running), snmp(lab)
        lab.ns(lab.agent_ns, PYTHON, str(TRAFFIC), "http", outside)
        lab.ns(lab.agent_ns, PYTHON, str(TRAFFIC), "tls", outside)
        on_the_wire = sum(sent_by_protocol(kernel_before, snmp(lab)).values())
        assert wait_for(lambda: status_of(running)["packetCount"] - before["packetCount"] >= on_the_wire, 30), \
            (on_the_wire, status_of(running))
        after, kernel_after = settled(running), snmp(lab)
        sent = sent_by_protocol(kernel_before, kernel_after)
        stats = {p: after["protocolStats"][p] - before["protocolStats"][p] for p in after["protocolStats"]}
        assert sent["TCP"] > 10 and stats["TCP"] == sent["TCP"] and stats["UDP"] == sent["UDP"] == 0
        assert stats["HTTP"] == 2  # the request head and the response head
        assert stats["TLS"] >= 4   # ClientHello, ServerHello..., application data both ways
        assert after["packetCount"] - before["packetCount"] == sent["TCP"]

        # The capture is an agent of its own, and what it streams is analysed like any agent's traffic.
        agent_id = after["agentId"]
        status, agent = running.rest.get(f"/api/v1/agents/{agent_id}")
        assert status == 200 and agent["hostname"] == f"the appliance port {lab.root_if}", agent
        assert shutil.which("iodined") and shutil.which("ptunnel-ng"), "make sysdeps-test installs iodine and ptunnel-ng"
        assert _tunnels_raise_alerts(lab, running, agent_id, tmp_path)

        # A capture process that dies is restarted with backoff and the death is recorded.
        pid = status_of(running)["pid"]
        counted = status_of(running)["packetCount"]
        os.kill(pid, signal.SIGKILL)
        dead = wait_for(lambda: (s := status_of(running))["lastError"] and s, 30)
        assert dead and f"capture process {pid} died (signal 9)" in dead["lastError"], dead
        back = wait_for(lambda: (s := status_of(running))["status"] == "running" and s["restarts"] == 1
                        and s["pid"] not in (None, pid) and s, 30)
        assert back, status_of(running)
        assert back["packetCount"] >= counted  # counters of one start add up across restarts
        lab.ns(lab.agent_ns, PYTHON, str(TRAFFIC), "icmp", outside, "2")
        assert wait_for(lambda: status_of(running)["packetCount"] >= counted + 4, 30)

        # The running capture survives an appliance restart (autoStart).
        running.app.stop()
        assert wait_for(lambda: not _alive(back["pid"]), 30), "the capture process outlived the appliance"
        running = capture_appliance(lab, tmp_path)
        resumed = wait_for(lambda: (s := status_of(running))["status"] == "running" and s["pid"] and s, 30)
        assert resumed and resumed["interface"] == lab.root_if and resumed["promiscuous"] is True
        assert resumed["autoStart"] is True

        status, stopped = running.rest.post("/api/v1/capture/stop", {})
        assert status == 200 and stopped["status"] == "idle" and stopped["autoStart"] is False and stopped["pid"] is None
        assert wait_for(lambda: not _alive(resumed["pid"]), 30)
        assert running.rest.post("/api/v1/capture/stop", {})[0] == 200  # idempotent
    finally:
        running.app.stop()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(") ")[1][0] != "Z"


def _tunnels_raise_alerts(lab: Lab, running: RunningAppliance, agent_id: str, tmp: Path) -> bool:
    """iodine (IP over DNS) and ptunnel-ng (TCP over ICMP) from the inside host, seen only on the mirror."""
    _, outside = lab.link
    tunnel_dns = outside.rsplit(".", 1)[0] + ".3"  # a second address: dnsmasq keeps port 53 of the first
    lab.ns(lab.peer_ns, "ip", "addr", "add", f"{tunnel_dns}/24", "dev", "eth0")
    start_tunnel_servers(lab, tunnel_dns, outside, tmp)
    wanted = {"DnsTunneling", "IcmpCovertChannel"}

    def categories() -> set[str]:
        status, body = running.rest.get(f"/api/v1/alerts?agent_id={agent_id}&limit=1000")
        assert status == 200, body
        return {a["category"] for a in body["alerts"]}

    for _ in range(3):  # a loaded machine moves fewer bytes through the tunnels: give it more rounds
        tunnel_round(lab, tunnel_dns, outside, tmp)
        if wait_for(lambda: wanted <= categories(), 15):
            break
    status, body = running.rest.get(f"/api/v1/alerts?agent_id={agent_id}&limit=1000")
    indicators = {a["category"]: a["indicator"] for a in body["alerts"]}
    assert wanted <= set(indicators), f"alerts seen: {indicators}; logs in {tmp}"
    assert "tunnel.lab" in indicators["DnsTunneling"] or tunnel_dns in indicators["DnsTunneling"]
    assert outside in indicators["IcmpCovertChannel"]
    return True


def test_an_interface_deleted_while_capturing_turns_the_status_into_error(lab: Lab, tmp_path: Path) -> None:
    running = capture_appliance(lab, tmp_path)
    try:
        start_capture(running, lab)
        pid = status_of(running)["pid"]
        lab.ns(lab.agent_ns, "ip", "link", "del", "eth0")  # a veth pair dies together: lab<k>r goes too
        failed = wait_for(lambda: (s := status_of(running))["status"] == "error" and s, 30)
        assert failed, status_of(running)
        assert f"interface {lab.root_if} vanished" in failed["lastError"], failed
        assert failed["lastErrorAt"] and failed["pid"] is None
        assert wait_for(lambda: not _alive(pid), 30), "the capture process was not ended"
        status, body = running.rest.post("/api/v1/capture/start", {"interface": lab.root_if})
        assert status == 422 and body["field"] == "interface"
        assert running.rest.get("/api/status")[0] == 200
    finally:
        running.app.stop()


def test_kernel_drops_are_counted_when_the_capture_falls_behind(lab: Lab, tmp_path: Path) -> None:
    """A capture process that cannot read (stopped) lets its 1 MiB socket buffer overflow: the kernel's drops show."""
    _, outside = lab.link
    running = capture_appliance(lab, tmp_path)
    try:
        start_capture(running, lab, bufferSize=1)
        lab.spawn(lab.peer_ns, PYTHON, "-c", UDP_SINK, outside)
        lab.wait_port(lab.peer_ns, 9999, "udp")
        before = settled(running)
        pid = before["pid"]
        os.kill(pid, signal.SIGSTOP)
        try:
            burst = json.loads(lab.ns(lab.agent_ns, PYTHON, str(TRAFFIC), "burst", outside, "9999", "20000").stdout)
        finally:
            os.kill(pid, signal.SIGCONT)
        # Every datagram is read from the buffer or counted dropped by the kernel: wait for the status to say so
        # before settling (a loaded machine can pause the reader for longer than the settling second).
        assert wait_for(lambda: (s := status_of(running))["protocolStats"]["UDP"] - before["protocolStats"]["UDP"]
                        + s["droppedCount"] - before["droppedCount"] >= 20000, 30), status_of(running)
        after = settled(running)
        captured = after["protocolStats"]["UDP"] - before["protocolStats"]["UDP"]
        dropped = after["droppedCount"] - before["droppedCount"]
        assert dropped > 0 and captured > 0, after
        # Every datagram sent is either captured or counted as dropped by the kernel. The kernel's count is of
        # frames, not of UDP datagrams: a neighbour (ARP) exchange during the burst may be dropped and counted
        # too (one extra frame was seen once in 2026-11-23 runs), so a few frames above the burst are allowed.
        assert burst["sent"] == 20000
        assert 20000 <= captured + dropped <= 20000 + 4, (captured, dropped)
        assert after["status"] == "running" and after["restarts"] == 0
    finally:
        running.app.stop()


def test_service_mode_captures_with_cap_net_raw_alone_promiscuous_included(lab: Lab, tmp_path: Path) -> None:
    """`capture.runner: service`: the test runs the capture process as sensor-capture.service would, with
    every capability but CAP_NET_RAW dropped; the appliance only writes the spec and reads the status."""
    if shutil.which("setpriv") is None:
        pytest.fail("setpriv (util-linux) is needed to drop capabilities")
    _, outside = lab.link
    inside, _ = lab.link
    running = start_appliance(tmp_path, capture={"internal_networks": [f"{inside}/32"], "runner": "service"})
    control = running.app.settings.paths.state_dir / "capture"
    service = subprocess.Popen(
        ["setpriv", "--bounding-set=-all,+net_raw", "--inh-caps=-all,+net_raw", PYTHON, "-m", "appliance.capture",
         "--control-dir", str(control)], cwd=ROOT, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        # Once setpriv has exec'd the capture (a status file is written), its capabilities are what it keeps.
        assert wait_for(lambda: _status_file(running).get("pid") == service.pid, 30), "the service did not report"
        effective = [line for line in Path(f"/proc/{service.pid}/status").read_text().splitlines()
                     if line.startswith("CapEff:")]
        assert effective == ["CapEff:\t0000000000002000"], effective  # CAP_NET_RAW (13) only
        status, reply = running.rest.post("/api/v1/capture/start", {"interface": lab.root_if, "promiscuous": True})
        assert status == 200, reply
        up = wait_for(lambda: (s := status_of(running))["status"] == "running" and s["pid"] == service.pid and s, 30)
        assert up, status_of(running)
        assert wait_for(lambda: {i["name"]: i for i in running.rest.get("/api/v1/capture/interfaces")[1]["interfaces"]}
                        [lab.root_if]["promiscuous"], 30)
        lab.ns(lab.agent_ns, PYTHON, str(TRAFFIC), "icmp", outside, "3")
        counted = wait_for(lambda: (s := status_of(running))["protocolStats"]["ICMP"] >= 6 and s, 30)
        assert counted and counted["protocolStats"]["ICMP"] == 6, status_of(running)
        status, stopped = running.rest.post("/api/v1/capture/stop", {})
        assert status == 200 and stopped["status"] == "idle"
        # The service stays up, idle; the kernel dropped the promiscuous membership with the socket.
        assert wait_for(lambda: not {i["name"]: i for i in running.rest.get("/api/v1/capture/interfaces")[1]["interfaces"]}
                        [lab.root_if]["promiscuous"], 30)
        assert wait_for(lambda: _status_file(running).get("state") == "idle", 30)
        assert service.poll() is None
    finally:
        service.terminate()
        service.wait(timeout=10)
        running.app.stop()
