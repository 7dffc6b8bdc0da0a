"""The analysis process (`analysis.worker: process`, the default) over real gRPC, REST and SQLite.

Alerts come from a separate process; REST changes reach it without a restart; a killed analysis
process is restarted and counted while ingestion goes on; a full queue drops and counts per agent
without blocking streams; metrics add both processes up.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from appliance.analysis import channel as channel_module
from appliance.analysis.channel import SEND_BUFFER

from tests.appliance.detection import scenarios as sc
from tests.appliance.test_cpus import thread_cpus
from tests.appliance.detection.conftest import alerts_of, start_detecting
from tests.conftest import RunningAppliance


def metrics(running: RunningAppliance) -> dict[str, Any]:
    status, body = running.rest.get("/api/v1/metrics")
    assert status == 200, body
    return body


def wait_for(predicate: Any, timeout: float = 30.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what or predicate}")


@pytest.fixture
def in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Start appliances with the analysis process, as `python -m appliance` does; stopped after the test."""
    monkeypatch.delenv("SENSOR_ADMIN_TOKEN", raising=False)
    started: list[RunningAppliance] = []

    def start(**overrides: Any) -> RunningAppliance:
        analysis = {"worker": "process", **overrides.pop("analysis", {})}
        running = start_detecting(tmp_path, analysis=analysis, **overrides)
        started.append(running)
        return running

    yield start
    for running in started:
        running.app.stop()


def test_alerts_are_raised_by_the_analysis_process(in_process: Any) -> None:
    running = in_process()
    worker = wait_for(lambda: metrics(running)["analysis_worker"]["running"] and metrics(running)["analysis_worker"],
                      what="the analysis process to be ready")
    assert worker["mode"] == "process" and worker["pid"] not in (0, os.getpid())
    granted = min(SEND_BUFFER, int(Path("/proc/sys/net/core/wmem_max").read_text()))
    assert worker["channel_buffer"] == 2 * granted  # what the kernel granted the channel (it reports double)
    assert worker["memory_reserved"] == (85 + 42) << 20  # analysis.memory_prefault_mb 128: whole MiB of arenas and heap
    assert running.app.pipeline is None and running.app.detection is None  # nothing analyses in this process
    sent = sc.stream(running.stub(), sc.iodine_tunnel())
    alerts = alerts_of(running)
    assert sent > 0 and [a["category"] for a in alerts] == ["DnsTunneling"]
    body = metrics(running)
    assert body["flows_processed"] == body["flows_created"] > 0  # every flow analysed over there, counted here
    assert body["alerts_generated"] == 1 and body["active_alerts"] == 1
    assert body["analysis_queue_dropped"] == 0 and body["analysis_worker"]["restarts"] == 0


def test_the_analysis_process_yields_the_cpu_to_ingestion(in_process: Any) -> None:
    """`analysis.nice`: the analysis process runs at a lower priority than the server (default 5 lower)."""
    running = in_process(analysis={"nice": 7})
    pid = wait_for(lambda: metrics(running)["analysis_worker"]["running"] and metrics(running)["analysis_worker"]["pid"],
                   what="the analysis process to be ready")
    assert os.getpriority(os.PRIO_PROCESS, pid) == min(os.getpriority(os.PRIO_PROCESS, 0) + 7, 19)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable CPUs")
def test_the_analysis_process_gets_a_cpu_of_its_own_and_keeps_it_across_a_restart(tmp_path: Path) -> None:
    """`analysis.pin_cpus` (the default; `python -m appliance` applies it after start): the analysis process on the
    last usable CPU, every thread of the server on the others but the sending thread, which goes with the analysis
    process, behind it in priority; a restarted analysis process lands on the same CPU; stop() gives an embedding
    process its CPUs back."""
    import threading

    from appliance.analysis.process import SENDER_BEHIND

    usable = os.sched_getaffinity(0)
    analysis_cpu, server_cpus = {max(usable)}, usable - {max(usable)}
    running = start_detecting(tmp_path, analysis={"worker": "process"})

    def placed_as_asked() -> bool:
        sender = [t.native_id for t in threading.enumerate() if t.name == "analysis-send"]
        assert len(sender) == 1
        assert os.sched_getaffinity(sender[0]) == analysis_cpu
        assert os.getpriority(os.PRIO_PROCESS, sender[0]) == min(
            os.getpriority(os.PRIO_PROCESS, os.getpid()) + running.app.settings.analysis.nice + SENDER_BEHIND, 19)
        tasks = [int(t) for t in os.listdir("/proc/self/task") if int(t) != sender[0]]
        return all(os.sched_getaffinity(t) == server_cpus for t in tasks)

    try:
        pid = wait_for(lambda: metrics(running)["analysis_worker"]["running"] and metrics(running)["analysis_worker"]["pid"])
        assert all(cpus == usable for cpus in thread_cpus(pid))  # nothing pinned until asked
        assert running.app.pin_cpus() == {"server": sorted(server_cpus), "analysis": sorted(analysis_cpu)}
        assert all(cpus == analysis_cpu for cpus in thread_cpus(pid))
        assert placed_as_asked()
        assert metrics(running)["analysis_worker"]["cpus"] == sorted(analysis_cpu)
        sent = sc.stream(running.stub(), sc.benign_office(0, minutes=2))  # threads gRPC starts now inherit the server's set
        assert sent > 0 and placed_as_asked()
        os.kill(pid, signal.SIGKILL)
        again = wait_for(lambda: (m := metrics(running)["analysis_worker"])["running"] and m["restarts"] == 1 and m["pid"],
                         what="the restarted analysis process")
        assert again != pid and all(cpus == analysis_cpu for cpus in thread_cpus(again))
        sc.stream(running.stub(), sc.iodine_tunnel())
        assert "DnsTunneling" in [a["category"] for a in alerts_of(running)]  # the pinned process analyses
    finally:
        running.app.stop()
    assert all(cpus == usable for cpus in thread_cpus(os.getpid()))


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable CPUs")
def test_when_the_system_refuses_to_pin_it_says_so_and_analysis_goes_on(
        in_process: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A system call filter that answers EPERM to sched_setaffinity (a unit without the shipped allowance)."""
    import appliance.cpus

    def refused(pid: int, cpus: Any) -> None:
        raise PermissionError(1, "Operation not permitted")

    running = in_process()
    wait_for(lambda: metrics(running)["analysis_worker"]["running"], what="the analysis process to be ready")
    monkeypatch.setattr(appliance.cpus.os, "sched_setaffinity", refused)
    assert running.app.pin_cpus() is None
    assert "analysis.pin_cpus: not applied" in caplog.text
    assert metrics(running)["analysis_worker"]["cpus"] == []
    monkeypatch.undo()
    sc.stream(running.stub(), sc.iodine_tunnel())
    assert [a["category"] for a in alerts_of(running)] == ["DnsTunneling"]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable CPUs")
@pytest.mark.parametrize("refused_side", ["server", "analysis"])
def test_a_refusal_for_either_process_pins_neither(
        in_process: Any, monkeypatch: pytest.MonkeyPatch, refused_side: str) -> None:
    """All or nothing: whichever process the system refuses to pin, the metrics claim nothing and the
    server's threads keep the CPUs they had."""
    import appliance.cpus

    running = in_process()
    wait_for(lambda: metrics(running)["analysis_worker"]["running"], what="the analysis process to be ready")
    ours = {int(t) for t in os.listdir("/proc/self/task")}
    usable = os.sched_getaffinity(0)
    assert all(cpus == usable for cpus in thread_cpus(os.getpid()))
    allowed = appliance.cpus.os.sched_setaffinity

    def refuse_one_side(tid: int, cpus: Any) -> None:
        if (tid in ours) == (refused_side == "server"):
            raise PermissionError(1, "Operation not permitted")
        allowed(tid, cpus)

    monkeypatch.setattr(appliance.cpus.os, "sched_setaffinity", refuse_one_side)
    assert running.app.pin_cpus() is None
    monkeypatch.undo()
    assert metrics(running)["analysis_worker"]["cpus"] == []
    assert all(cpus == usable for cpus in thread_cpus(os.getpid()))


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable CPUs")
def test_a_sending_thread_whose_priority_cannot_be_lowered_stays_with_the_server(
        in_process: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """At the analysis process's priority or above it, the sending thread would take the analysis CPU from analysis."""
    import threading

    def refused(which: int, who: int, prio: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    running = in_process()
    wait_for(lambda: metrics(running)["analysis_worker"]["running"], what="the analysis process to be ready")
    monkeypatch.setattr(os, "setpriority", refused)
    usable = os.sched_getaffinity(0)
    placed = running.app.pin_cpus()
    monkeypatch.undo()
    assert placed is not None and metrics(running)["analysis_worker"]["cpus"] == placed["analysis"]
    sender = next(t.native_id for t in threading.enumerate() if t.name == "analysis-send")
    assert os.sched_getaffinity(sender) == set(placed["server"]) != usable
    assert "the sending thread stays on the server's CPUs" in caplog.text
    sc.stream(running.stub(), sc.iodine_tunnel())
    assert [a["category"] for a in alerts_of(running)] == ["DnsTunneling"]


def test_with_pin_cpus_off_the_kernel_places_both_processes(in_process: Any) -> None:
    running = in_process(analysis={"pin_cpus": False})
    pid = wait_for(lambda: metrics(running)["analysis_worker"]["running"] and metrics(running)["analysis_worker"]["pid"])
    assert running.app.pin_cpus() is None
    usable = os.sched_getaffinity(0)
    assert all(cpus == usable for cpus in thread_cpus(pid) + thread_cpus(os.getpid()))
    assert metrics(running)["analysis_worker"]["cpus"] == []


def test_rest_changes_reach_the_analysis_process_without_a_restart(in_process: Any) -> None:
    running = in_process()
    status, body = running.rest.post("/api/v1/whitelist", {"value": "tunnel-example.net", "comment": "lab"})
    assert status == 201, body
    sc.stream(running.stub(), sc.iodine_tunnel())
    assert alerts_of(running) == []
    assert metrics(running)["detections_suppressed"] > 0
    # Delete it again: the next tunnel (a new agent) raises its alert.
    assert running.rest.call("DELETE", f"/api/v1/whitelist/{body['id']}")[0] == 200
    second = sc.iodine_tunnel()
    second.machine_id = "second-agent"
    sc.stream(running.stub(), second)
    assert [a["category"] for a in alerts_of(running)] == ["DnsTunneling"]


def test_console_layer_switches_reach_the_analysis_process(in_process: Any) -> None:
    running = in_process()
    status, current = running.rest.get("/api/v1/settings")
    assert status == 200, current
    layers = [layer for layer in current["detection"]["enabledLayers"] if layer != "dns"]
    status, body = running.rest.call("PUT", "/api/v1/settings", {"detection": {"enabledLayers": layers}})
    assert status == 200, body
    sc.stream(running.stub(), sc.iodine_tunnel())
    assert alerts_of(running) == [] and metrics(running)["detections_suppressed"] > 0


def test_triage_reaches_the_analysis_process_a_resolved_alert_is_never_updated(in_process: Any) -> None:
    """The analysis process remembers open alerts in memory; an analyst resolving one (another process's
    write) makes it forget them, so the same tunnel afterwards opens a new alert instead of updating the
    resolved one."""
    running = in_process()
    sc.stream(running.stub(), sc.iodine_tunnel())
    [first] = alerts_of(running)
    status, body = running.rest.post(f"/api/v1/alerts/{first['id']}/status", {"status": "Resolved", "note": "lab"})
    assert status == 200, body
    sc.stream(running.stub(), sc.iodine_tunnel(start_ms=sc.T0_MS + 3_600_000))
    alerts = {a["id"]: a for a in alerts_of(running)}
    assert len(alerts) == 2 and alerts[first["id"]]["status"] == "Resolved"
    assert alerts[first["id"]]["detection_count"] == first["detection_count"]  # untouched after it was resolved
    [second] = [a for a in alerts.values() if a["id"] != first["id"]]
    assert second["status"] == "New" and second["category"] == "DnsTunneling"
    assert metrics(running)["active_alerts"] == 1


def test_a_new_rule_file_is_loaded_by_the_analysis_process(in_process: Any, tmp_path: Path) -> None:
    """The analysis process watches the rule files itself and says which rule set it runs
    (`analysis_worker.signature_rules`, `signature_reloads`); once it counts the new rule, flows meet it."""
    running = in_process()
    worker = wait_for(lambda: (w := metrics(running)["analysis_worker"])["running"] and w,
                      what="the analysis process to be ready")
    before = worker["signature_rules"]
    assert before == metrics(running)["signature_rules"] > 0  # both engines read the shipped rules
    rule = tmp_path / "signatures" / "lab.yaml"
    rule.write_text(
        "id: LAB-001\ntitle: Lab tunnel domain\ndescription: The lab's tunnel.\nprotocol: dns\n"
        "category: DnsTunneling\nseverity: High\nconfidence: 0.95\n"
        "conditions:\n  - field: dns.qname\n    op: endswith\n    value: .t.tunnel-example.net\n")
    wait_for(lambda: metrics(running)["signature_rules"] > before, what="the REST side to load the rule")
    loaded = wait_for(lambda: (w := metrics(running)["analysis_worker"])["signature_rules"] == before + 1 and w,
                      what="the analysis process to load the rule")
    assert loaded["signature_reloads"] >= worker["signature_reloads"] + 1
    sc.stream(running.stub(), sc.iodine_tunnel())
    alerts = alerts_of(running)
    assert [a["category"] for a in alerts] == ["DnsTunneling"]
    assert any(d["detector"] == "signature:LAB-001" for d in alerts[0]["detections"])


def test_a_killed_analysis_process_is_restarted_and_counted_while_ingestion_goes_on(in_process: Any) -> None:
    running = in_process()
    pid = wait_for(lambda: metrics(running)["analysis_worker"]["running"] and metrics(running)["analysis_worker"]["pid"])
    stub = running.stub()
    errors: list[BaseException] = []
    received: list[int] = []

    def load() -> None:  # benign agents streaming while the analysis process dies under them
        try:
            for n in range(6):
                received.append(sc.stream(stub, sc.benign_office(n, minutes=5, seed=n)))
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    feeder = threading.Thread(target=load)
    feeder.start()
    wait_for(lambda: metrics(running)["flows_processed"] > 0, what="analysis under load")
    os.kill(pid, signal.SIGKILL)
    started = time.monotonic()
    while feeder.is_alive():  # the server keeps answering while its analysis process is gone
        status, _ = running.rest.get("/api/status")
        assert status == 200 and time.monotonic() - started < 120
        time.sleep(0.2)
    feeder.join()
    assert not errors and len(received) == 6 and all(received)  # ingestion never noticed
    worker = wait_for(lambda: (m := metrics(running)["analysis_worker"])["running"] and m["restarts"] == 1 and m,
                      what="the restarted analysis process")
    assert worker["pid"] != pid
    sc.stream(stub, sc.iodine_tunnel())
    assert [a["category"] for a in alerts_of(running)] == ["DnsTunneling"]  # the new process analyses
    body = metrics(running)
    # Every flow is accounted for: analysed, dropped by the queue, or lost with the killed process.
    assert body["flows_processed"] + body["analysis_queue_dropped"] + worker["flows_lost"] >= body["flows_created"]


def test_a_full_queue_drops_and_counts_per_agent_without_blocking_streams(in_process: Any) -> None:
    running = in_process(limits={"analysis_queue": 50})
    stub = running.stub()
    floods = [sc.benign_office(n, minutes=10, seed=n) for n in range(3)]
    for flood in floods:
        started = time.monotonic()
        assert sc.stream(stub, flood) > 0
        assert time.monotonic() - started < 30
    assert running.app.analysis.drain()
    body = metrics(running)
    assert body["analysis_queue_dropped"] > 0
    assert sum(body["analysis_dropped_by_agent"].values()) == body["analysis_queue_dropped"]
    assert body["flows_processed"] + body["analysis_queue_dropped"] == body["flows_created"]
    agents = {a["id"]: a for a in running.rest.get("/api/v1/agents")[1]["agents"]}
    assert sum(a.get("analysis_dropped", 0) for a in agents.values()) == body["analysis_queue_dropped"]


@pytest.mark.slow
def test_sigterm_analyses_every_open_flow_before_the_entry_point_exits(tmp_path: Path) -> None:
    """`python -m appliance` (analysis process, the default): the analysis process runs on a CPU of its own and
    the server on the others; flows still open at SIGTERM are flushed through the analysis process and their
    alert is in SQLite when the server has exited."""
    import json
    import queue
    import re
    import sqlite3
    import ssl
    import subprocess
    import urllib.request

    import grpc

    from appliance.generated import sensor_pb2_grpc
    from tests.appliance.test_main import ROOT, banner, start

    signatures = tmp_path / "sig"
    signatures.mkdir()
    for rule in (ROOT / "rules").glob("*.yaml"):
        (signatures / rule.name).write_bytes(rule.read_bytes())
    proc = start(tmp_path, f"""
grpc: {{listen: "127.0.0.1:0", tls: false}}
rest: {{listen: "127.0.0.1:0"}}
paths: {{state_dir: "{tmp_path}/state", certs_dir: "{tmp_path}/certs", static_dir: "{tmp_path}/static", signatures_dir: "{signatures}"}}
""")
    try:
        shown = banner(proc)
        port = int(re.search(r"port (\d+)", shown["gRPC ingestion"]).group(1))
        tunnel = sc.iodine_tunnel()
        hold = queue.Queue[None]()
        sent = threading.Event()

        def held_open() -> Any:  # every packet, then the stream stays open: its flows are not flushed
            yield from sc.batches(tunnel.sorted())
            sent.set()
            hold.get()

        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        stub = sensor_pb2_grpc.SensorServiceStub(channel)
        call = stub.StreamPacketBatches.future(held_open(), metadata=[("x-machine-id", tunnel.machine_id)])
        assert sent.wait(30)
        rest = int(re.search(r"https://localhost:(\d+)/", shown["REST API"]).group(1))
        token = (tmp_path / "state" / "admin.token").read_text().strip()
        context = ssl.create_default_context(cafile=str(tmp_path / "certs" / "ca.pem"))

        def received() -> int:
            request = urllib.request.Request(f"https://localhost:{rest}/api/v1/metrics",
                                             headers={"Authorization": f"Bearer {token}"})
            with urllib.request.urlopen(request, context=context, timeout=10) as reply:
                return int(json.load(reply)["packets_received"])

        wait_for(lambda: received() == len(tunnel.packets), what="the server to read every packet")
        children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        assert children, "no analysis process under the server"
        usable = os.sched_getaffinity(0)
        if len(usable) >= 2:  # analysis.pin_cpus, applied by the entry point after start
            assert all(cpus == {max(usable)} for cpus in thread_cpus(int(children[0])))
            server = thread_cpus(proc.pid)  # every thread on the server's CPUs but the sending thread, with analysis
            assert server.count({max(usable)}) == 1 and server.count(usable - {max(usable)}) == len(server) - 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, proc.stdout.read() if proc.stdout else ""
        hold.put(None)
        call.cancel()
        channel.close()
    finally:
        if proc.poll() is None:
            proc.kill()
    with sqlite3.connect(tmp_path / "state" / "detection.db") as db:
        categories = [row[0] for row in db.execute("SELECT category FROM alerts")]
    assert categories == ["DnsTunneling"]
    for pid in children:  # the analysis process finished with its server
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


def gathering_process(tmp_path: Path, signatures_dir: Path) -> Any:
    """A started, ready analysis process whose sender gathers for 30 s (batches of 64 flows)."""
    from appliance.analysis import process
    from appliance.config import parse_settings

    (tmp_path / "state").mkdir()
    settings = parse_settings({"paths": {"state_dir": str(tmp_path / "state"), "certs_dir": str(tmp_path / "certs"),
                                         "static_dir": str(tmp_path / "static"), "signatures_dir": str(signatures_dir)}})
    analysis = process.AnalysisProcess(settings, 10_000, batch_flows=64, gather=30.0)
    analysis.start()
    try:
        wait_for(lambda: analysis.status()["running"], 60, "the analysis process to be ready")
    except AssertionError:
        analysis.stop()
        raise
    return analysis


def test_the_sender_gathers_flows_into_few_frames_a_full_batch_or_a_drain_sends_at_once(tmp_path: Path) -> None:
    """Over a real analysis process: flows and DNS answers handed over in many small calls leave as one DNS
    frame ahead of one flow frame; a full batch does not wait for the gathering to end, and a drain sends
    what is pending at once and waits until it is analysed. (What the frames hold: tests/appliance/native/
    test_outbox.py.)"""
    from appliance.model import DnsAnswer, DnsMessage
    from tests.appliance.flows.test_record_codec import flows_of

    flows = flows_of(sc.iodine_tunnel(seconds=30), sc.benign_office(1, minutes=10))
    assert len(flows) > 80
    analysis = gathering_process(tmp_path, Path(__file__).resolve().parents[3] / "rules")
    frames = lambda: analysis._outbox.frames_sent  # noqa: E731
    try:
        answer = DnsMessage(7, True, 0, "example.org", 1, 1, [DnsAnswer("example.org", 1, 60, "192.0.2.7")])
        for i in range(0, 20, 2):
            analysis.submit_many(flows[i : i + 2])
            analysis.observe_answers([("agent", answer)])
        time.sleep(0.5)
        assert frames() == 0 and analysis.queue_depth == 20  # gathering
        started = time.monotonic()
        assert analysis.drain(20)
        assert time.monotonic() - started < 15  # sent at once, not after the 30 s of gathering
        assert frames() == 2  # one of DNS answers, one of flows
        assert analysis.counter("flows_processed") == 20
        analysis.submit_many(flows[20:84])  # a full batch
        wait_for(lambda: frames() == 3, 15, "the full batch to be sent")
        wait_for(lambda: analysis.counter("flows_processed") == 84, 15, "the full batch to be analysed")
    finally:
        analysis.stop()


def test_send_now_sends_what_waits_without_waiting_out_the_gathering(tmp_path: Path) -> None:
    """`send_now` (called when an agent's stream ends): the flows waiting go to the analysis process at once and are
    analysed there, no drain asked; the flows handed over after it are gathered again."""
    from tests.appliance.flows.test_record_codec import flows_of

    flows = flows_of(sc.benign_office(1, minutes=10))
    assert len(flows) > 40
    analysis = gathering_process(tmp_path, tmp_path)
    frames = lambda: analysis._outbox.frames_sent  # noqa: E731
    try:
        analysis.submit_many(flows[:20])
        time.sleep(0.5)
        assert frames() == 0 and analysis.queue_depth == 20  # gathering
        started = time.monotonic()
        analysis.send_now()
        wait_for(lambda: analysis.counter("flows_processed") == 20, 15, "the flows to be analysed")
        assert time.monotonic() - started < 15 and frames() == 1  # at once, not after the 30 s of gathering
        analysis.submit_many(flows[20:40])
        time.sleep(0.5)
        assert frames() == 1 and analysis.queue_depth == 20  # the next ones are gathered again
    finally:
        analysis.stop()


def test_a_streams_end_hands_its_flows_to_the_analysis_process_at_once(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Over the real gRPC server, with a hand-off that would gather for 30 s: when an agent's stream ends, its
    flows (flushed by the end) are analysed and its alert raised within seconds, nobody asking for a drain."""
    from appliance import app as app_module
    from appliance.analysis import process

    class GathersLong(process.AnalysisProcess):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, gather=30.0, **kwargs)

    monkeypatch.setattr(app_module, "AnalysisProcess", GathersLong)
    monkeypatch.delenv("SENSOR_ADMIN_TOKEN", raising=False)
    running = start_detecting(tmp_path, analysis={"worker": "process"})
    try:
        assert isinstance(running.app.analysis, GathersLong)
        wait_for(lambda: metrics(running)["analysis_worker"]["running"], 60, "the analysis process to be ready")
        started = time.monotonic()
        assert sc.stream(running.stub(), sc.iodine_tunnel()) > 0
        body = wait_for(lambda: (m := metrics(running))["flows_processed"] == m["flows_created"] > 0
                        and m["alerts_generated"] == 1 and m, 15, "the stream's flows to be analysed")
        assert time.monotonic() - started < 15 and body["analysis_queue_depth"] == 0
    finally:
        running.app.stop()


def test_a_frame_the_dying_process_never_got_is_counted_lost_once(tmp_path: Path) -> None:
    """Flows written whole to a process that died are counted by the restart (what it was handed less what it
    read); the flows of a frame the dead channel refused are counted by the sender, and only there."""
    import socket

    from appliance.analysis import process
    from appliance.analysis.channel import Channel
    from appliance.config import parse_settings
    from tests.appliance.flows.test_record_codec import flows_of

    settings = parse_settings({"paths": {"state_dir": str(tmp_path / "state"), "certs_dir": str(tmp_path / "certs"),
                                         "static_dir": str(tmp_path / "static"), "signatures_dir": str(tmp_path)}})
    analysis = process.AnalysisProcess(settings, 10_000, batch_flows=16)
    flows = flows_of(sc.benign_office(1, minutes=2))[:20]
    ours, theirs = socket.socketpair()
    theirs.close()  # the process died
    analysis._channel, analysis._ready = Channel(ours), True

    def restarted(dead: int) -> None:  # stands in for the receiver's restart: stop the loop after one failure
        analysis._closing = True

    analysis._wait_for_generation = restarted  # type: ignore[method-assign]
    analysis.submit_many(flows)
    analysis._outbox.poke(flush=True)
    analysis._send_loop()
    assert analysis.flows_lost == 16  # the frame that did not go; the other 4 still wait for the next process
    assert analysis._outbox.take_sent() == 0 and analysis.queue_depth == 4
    ours.close()


def test_the_oldest_flow_waiting_says_how_far_behind_a_stopped_analysis_process_is(
        in_process: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """`analysis_queue_oldest_s`: how long the oldest flow waiting in the server's outbox has waited. The analysis
    process stopped (SIGSTOP), its channel fills (made small here: 64 KB asked), flows wait in the outbox and the
    figure grows with the time they wait; once it runs again and catches up, it is 0.0."""
    monkeypatch.setattr(channel_module, "SEND_BUFFER", 64 << 10)
    running = in_process()
    pid = wait_for(lambda: metrics(running)["analysis_worker"]["running"] and metrics(running)["analysis_worker"]["pid"])
    assert metrics(running)["analysis_queue_oldest_s"] == 0.0
    stub = running.stub()
    os.kill(pid, signal.SIGSTOP)
    try:
        for n in range(4):
            assert sc.stream(stub, sc.benign_office(n, minutes=30, seed=n)) > 0
        wait_for(lambda: metrics(running)["analysis_queue_depth"] > 0, what="flows waiting behind a full channel")
        waited = metrics(running)["analysis_queue_oldest_s"]
        time.sleep(1.0)
        body = metrics(running)
        assert body["analysis_queue_oldest_s"] >= waited + 1.0 and body["analysis_queue_depth"] > 0
    finally:
        os.kill(pid, signal.SIGCONT)
    assert running.app.analysis.drain()
    body = metrics(running)
    assert body["analysis_queue_depth"] == 0 and body["analysis_queue_oldest_s"] == 0.0
    assert body["analysis_worker"]["restarts"] == 0
