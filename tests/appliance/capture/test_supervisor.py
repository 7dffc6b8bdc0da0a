"""The supervisor's own rules with real processes: restart backoff, service-mode heartbeat, persisted state."""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path

import pytest

from appliance.capture.interfaces import InterfaceCatalog
from appliance.capture.model import StartRequest
from appliance.capture.supervisor import CaptureOptions, CaptureSupervisor, StreamTarget
from appliance.console_settings import CaptureSettings
from appliance.pki import CertificateAuthority
from tests.polling import wait_for


def supervisor(tmp: Path, python: str, resume: bool = True, **options: object) -> CaptureSupervisor:
    ca = CertificateAuthority.ensure(tmp / "certs", ["localhost"])

    def issue(name: str) -> tuple[bytes, bytes]:
        issued = ca.issue_agent(name)
        return issued.cert_pem, issued.key_pem

    return CaptureSupervisor(
        tmp / "capture", InterfaceCatalog(), CaptureOptions(("10.0.0.0/8",), **options),  # type: ignore[arg-type]
        defaults=CaptureSettings, issue_certificate=issue, ca_pem=ca.ca_pem,
        target=lambda: StreamTarget("127.0.0.1:1", "localhost", False), version="test", python=python,
        resume_allowed=lambda: resume,
    )


def test_a_capture_process_that_keeps_dying_is_restarted_with_growing_backoff(tmp_path: Path) -> None:
    # /bin/false stands for a capture process that dies at once (exit code 1) every time.
    sup = supervisor(tmp_path, "/bin/false", backoff_initial=0.1, backoff_max=0.4, tick=0.02)
    sup.start()
    try:
        reply = sup.begin(StartRequest(interface="lo"))
        assert reply.status == "running" and reply.autoStart is True
        assert wait_for(lambda: sup.status().restarts >= 4), sup.status()
        status = sup.status()
        assert status.lastError and "died (exit code 1); restarting in 0.4 s" in status.lastError
        assert sup.events["process_exits"] >= 4
    finally:
        sup.end()
        sup.close()
    assert sup.status().status == "idle" and sup.status().autoStart is False


def test_the_identity_and_spec_files_are_private_and_name_the_port(tmp_path: Path) -> None:
    sup = supervisor(tmp_path, "/bin/false", backoff_initial=5.0)
    sup.start()
    try:
        sup.begin(StartRequest(interface="lo", snaplen=128))
        control = tmp_path / "capture"
        assert stat.S_IMODE(control.stat().st_mode) == 0o700
        for name in ("capture.key", "capture.pem", "spec.json", "capture.json"):
            assert stat.S_IMODE((control / name).stat().st_mode) == 0o600, name
        from cryptography import x509
        cert = x509.load_pem_x509_certificate((control / "capture.pem").read_bytes())
        assert cert.subject.rfc4514_string() == "CN=the appliance port lo"
        spec = json.loads((control / "spec.json").read_text())
        assert spec["running"] is True and spec["interface"] == "lo" and spec["snaplen"] == 128
        assert spec["buffer_bytes"] == CaptureSettings().bufferSize * 1024 * 1024  # from the console settings
    finally:
        sup.close()


def test_service_mode_reports_a_silent_service_as_an_error_and_resumes_after_restart(tmp_path: Path) -> None:
    sup = supervisor(tmp_path, "/bin/false", runner="service", heartbeat_timeout=0.3, tick=0.05)
    sup.start()
    try:
        sup.begin(StartRequest(interface="lo"))
        failed = wait_for(lambda: sup.status().status == "error")
        assert failed and "sensor-capture.service has not reported" in (sup.status().lastError or "")
        # The service writes its status: the capture counts as running again.
        spec = json.loads((tmp_path / "capture" / "spec.json").read_text())
        status_file = tmp_path / "capture" / "status.json"

        def beat() -> bool:
            status_file.write_text(json.dumps({"generation": spec["generation"], "state": "running", "pid": 1,
                                               "heartbeat": time.time(), "packetCount": 3, "byteCount": 300}))
            return sup.status().status == "running"

        assert wait_for(beat)
        assert sup.status().packetCount == 3
    finally:
        sup.close()
    # Closing the appliance in service mode leaves the service's spec alone; autoStart stays for the next start.
    again = supervisor(tmp_path, "/bin/false", runner="service", heartbeat_timeout=0.3, tick=0.05)
    again.start()
    try:
        assert again.status().interface == "lo" and again.status().autoStart is True
    finally:
        again.close()


def test_a_capture_process_without_cap_net_raw_is_not_restarted_and_says_so(tmp_path: Path) -> None:
    # Stands for the capture process's answer when it may not open AF_PACKET (exit code 3).
    script = tmp_path / "no-capability"
    script.write_text("#!/bin/sh\nexit 3\n")
    script.chmod(0o755)
    sup = supervisor(tmp_path, str(script), backoff_initial=0.05, tick=0.02)
    sup.start()
    try:
        sup.begin(StartRequest(interface="lo"))
        assert wait_for(lambda: sup.status().status == "error")
        time.sleep(0.3)
        status = sup.status()
        assert status.restarts == 0 and sup.events["process_exits"] == 1 and status.pid is None
        assert "not permitted to capture (no CAP_NET_RAW)" in (status.lastError or "")
    finally:
        sup.close()


def test_a_hostile_status_file_is_ignored_and_the_supervisor_keeps_serving(tmp_path: Path) -> None:
    """status.json is written by another, less trusted process: nothing in it may break the supervisor."""
    sup = supervisor(tmp_path, "/bin/false", runner="service", heartbeat_timeout=0.5, tick=0.02)
    sup.start()
    try:
        sup.begin(StartRequest(interface="lo"))
        spec = json.loads((tmp_path / "capture" / "spec.json").read_text())
        status_file = tmp_path / "capture" / "status.json"
        good = {"generation": spec["generation"], "state": "running", "heartbeat": time.time(), "packetCount": 5}
        hostile = [
            b"\xff\xfe not json", b"[1, 2, 3]", b"{" * 100_000, json.dumps({**good, "packetCount": "many"}).encode(),
            json.dumps({**good, "packetCount": -1}).encode(), json.dumps({**good, "packetCount": 1 << 70}).encode(),
            json.dumps({**good, "protocolStats": {f"k{i}": 1 for i in range(1000)}}).encode(),
            json.dumps({**good, "state": "exploded"}).encode(), json.dumps({**good, "heartbeat": "soon"}).encode(),
            json.dumps({**good, "error": "x" * 100_000, "state": "error"}).encode(),
        ]
        for payload in hostile:
            status_file.write_bytes(payload)
            time.sleep(0.06)
            reply = sup.status()
            assert reply.packetCount == 0, payload[:60]
        assert wait_for(lambda: sup.status().status == "error")

        def beat() -> bool:  # a fresh heartbeat on every look: one write may be read after its 0.5 s have passed
            status_file.write_text(json.dumps({**good, "heartbeat": time.time()}))
            return sup.status().packetCount == 5 and sup.status().status == "running"

        assert wait_for(beat)
    finally:
        sup.close()


def test_a_running_capture_is_resumed_at_start_unless_the_console_turned_autostart_off(tmp_path: Path) -> None:
    first = supervisor(tmp_path, "/bin/false", backoff_initial=5.0)
    first.start()
    first.begin(StartRequest(interface="lo"))
    first.close()  # the appliance stops with the capture running
    off = supervisor(tmp_path, "/bin/false", resume=False, backoff_initial=5.0)
    off.start()
    try:
        status = off.status()
        assert status.status == "idle" and status.pid is None
        assert status.autoStart is True and status.interface == "lo"  # kept for when the setting is on again
    finally:
        off.close()
    on = supervisor(tmp_path, "/bin/false", backoff_initial=5.0)
    on.start()
    try:
        assert on.status().status in ("running", "error") and on.status().interface == "lo"
        assert wait_for(lambda: on.events["process_exits"] >= 1)  # it did start a capture process
    finally:
        on.close()


def test_the_capture_process_gets_none_of_the_appliances_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SENSOR_ADMIN_TOKEN", "admin-secret-do-not-pass")
    monkeypatch.setenv("SENSOR_DEPLOY_TOKEN", "deploy-secret-do-not-pass")
    script = tmp_path / "capture-stand-in"
    script.write_text("#!/bin/sh\nexec sleep 30\n")
    script.chmod(0o755)
    sup = supervisor(tmp_path, str(script))
    sup.start()
    try:
        pid = sup.begin(StartRequest(interface="lo")).pid
        assert pid
        # The kernel sets a process's environment range late in exec, after Popen has seen the exec happen: read it
        # once the stand-in's last program (sleep) shows in its command line, or an exec still under way reads empty.
        assert wait_for(lambda: Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep\0"))
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert not [v for v in environ if b"secret" in v], environ
        assert any(v.startswith(b"PYTHONPATH=") for v in environ)
    finally:
        sup.end()
        sup.close()
