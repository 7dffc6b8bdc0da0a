"""The enrollment scripts: steps in order, the embedded certificate, and the POSIX script run for real."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from appliance.enrollment.scripts import Template, TemplateError, quote_powershell, quote_sh
from appliance.enrollment.service import RUN_AS_ROOT
from appliance.generated import sensor_pb2, sensor_pb2_grpc
from appliance.pki import fingerprint
from tests.appliance import wire
from tests.appliance.enrollment.conftest import AGENT_LINUX, embedded, embedded_cert, fetch_script, new_token, put_payload

ROOT = Path(__file__).resolve().parents[3]
PCAP = ROOT / "tests" / "fixtures" / "pcaps" / "dns-benign-a-aaaa-mx.pcap"

INSTALLER = Path(__file__).resolve().parents[3] / "installer"


def _check_agent_cert(appliance, script: str, token: str, var: str) -> x509.Certificate:
    cert = embedded_cert(script, var)
    ca = appliance.app.ca.ca_cert
    cert.verify_directly_issued_by(ca)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == f"sensor-agent-{token[:6]}"
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    days = (cert.not_valid_after_utc - cert.not_valid_before_utc).days
    assert 364 <= days <= 366
    return cert


def _positions(script: str, markers: list[str]) -> list[int]:
    """Where each step is, each searched after the previous one: a missing or misplaced step fails."""
    positions = []
    start = 0
    for marker in markers:
        assert marker in script, f"missing step: {marker}"
        index = script.find(marker, start)
        assert index >= 0, f"step out of order: {marker}"
        positions.append(index)
        start = index + len(marker)
    return positions


WINDOWS_STEPS = [
    "IsInRole([Security.Principal.WindowsBuiltInRole]::Administrator)",  # elevation, first
    "New-Item -ItemType Directory -Force -Path $InstallDir, $CertDir",  # install dir + certs
    "Write-Secret (Join-Path $CertDir 'ca.pem')",
    "Write-Secret (Join-Path $CertDir 'agent.pem')",
    "Write-Secret (Join-Path $CertDir 'agent.key')",
    "Get-SensorFile $agentPath $AgentExe",  # downloads
    'Get-SensorFile "driver/sensor-driver.$ext"',
    "certutil.exe -f -addstore Root $cer",
    "certutil.exe -f -addstore TrustedPublisher $cer",
    "pnputil.exe /add-driver (Join-Path $DriverDir 'sensor-driver.inf') /install",
    "Set-ItemProperty -Path $RegPath -Name TargetUrl -Value $TargetUrl",
    "Set-ItemProperty -Path $RegPath -Name MachineId -Value $MachineId",
    "type= kernel start= demand",  # driver service, demand start
    "-StartupType Automatic",  # agent service, auto start
    "sc.exe start $DriverService",
    "Start-Sleep -Seconds 2",
    "Start-Service -Name $AgentService",
]


def test_powershell_script_has_every_step_in_order(appliance):
    put_payload(appliance, driver=True)
    token = new_token(appliance)["token"]
    status, body = fetch_script(appliance, "windows", token)
    assert status == 200
    script = body.decode()
    positions = _positions(script, WINDOWS_STEPS)
    assert positions == sorted(positions)
    assert "'{{" not in script
    assert "$HasDriver   = 'true' -eq 'true'" in script
    assert f"$TargetUrl   = 'https://localhost:{appliance.app.grpc_port}'" in script
    assert "MachineGuid" in script and "HKLM:\\SOFTWARE\\$Product" in script
    assert "$Product     = 'SensorAgent'" in script
    assert "$env:ProgramFiles" in script
    # The not-elevated branch stops with a message, before anything is written.
    assert re.search(r"IsInRole\(.*\)\) \{\s*throw 'enroll: this must run elevated", script)
    # Downloads pin the server certificate; validation is never switched off globally.
    server_fp = fingerprint(appliance.app.ca.server_cert())
    assert f"$ServerPin   = '{server_fp}'" in script
    assert "ServicePointManager]::ServerCertificateValidationCallback" not in script


def test_powershell_embedded_certificate_and_key(enrolling):
    token = new_token(enrolling)["token"]
    script = fetch_script(enrolling, "windows", token)[1].decode()
    cert = _check_agent_cert(enrolling, script, token, "CertB64")
    key = embedded(script, "KeyB64")
    from cryptography.hazmat.primitives import serialization

    private = serialization.load_pem_private_key(key, password=None)
    assert isinstance(private, ec.EllipticCurvePrivateKey)
    assert private.public_key().public_numbers() == cert.public_key().public_numbers()
    assert embedded(script, "CaB64") == enrolling.app.ca.ca_pem
    status, body = enrolling.rest.get("/api/v1/agent/certificates")
    [record] = body["certificates"]
    assert record["fingerprint"] == fingerprint(cert)
    assert record["serial"] == format(cert.serial_number, "x")
    assert record["common_name"] == f"sensor-agent-{token[:6]}" and record["os"] == "windows"


def test_each_enrollment_gets_a_unique_certificate(enrolling):
    certs = []
    for _ in range(3):
        token = new_token(enrolling)["token"]
        certs.append(embedded_cert(fetch_script(enrolling, "windows", token)[1].decode(), "CertB64"))
    assert len({c.serial_number for c in certs}) == 3
    assert len({c.public_key().public_numbers() for c in certs}) == 3


def test_powershell_without_driver_skips_driver_steps_with_a_message(enrolling):
    token = new_token(enrolling)["token"]
    script = fetch_script(enrolling, "windows", token)[1].decode()
    assert "$HasDriver   = 'false' -eq 'true'" in script
    assert "the appliance payload holds no kernel driver: skipping the driver steps" in script
    # Every driver step sits behind `if ($HasDriver)`.
    for step in ("certutil.exe -f -addstore Root", "pnputil.exe /add-driver", "sc.exe start $DriverService"):
        before = script[: script.index(step)]
        assert before.rfind("if ($HasDriver) {") > before.rfind("\n}\n")


def test_windows_one_line_command_pins_the_server_certificate(enrolling):
    reply = new_token(enrolling)
    command = reply["command"]
    server_fp = fingerprint(enrolling.app.ca.server_cert())
    assert f"[SensorPin]::Fp='{server_fp}'" in command
    assert "$r.ServerCertificateValidationCallback=[SensorPin]::Callback" in command  # per request
    assert "[Net.ServicePointManager]::ServerCertificateValidationCallback" not in command
    assert "& ([scriptblock]::Create($s))" in command


def test_shell_scripts_have_steps_in_order_and_the_certificate(enrolling):
    for os_kind in ("linux", "macos"):
        token = new_token(enrolling)["token"]
        script = fetch_script(enrolling, os_kind, token)[1].decode()
        assert f"OS_KIND='{os_kind}'" in script
        markers = ['die "run this as root', "machine_id=$(read_machine_id)", 'put_b64 "$CA_B64"',
                   'put_b64 "$CERT_B64"', 'put_b64 "$KEY_B64"', "curl -fsS -k --pinnedpubkey",
                   'printf \'target_url: %s\\n\'', "install_systemd", "install_launchd"]
        positions = _positions(script, markers)
        assert positions == sorted(positions)
        _check_agent_cert(enrolling, script, token, "CERT_B64")
        assert "systemctl enable sensor-agent.service" in script and "launchctl bootstrap system" in script
        assert "IOPlatformUUID" in script and "/etc/machine-id" in script


@pytest.mark.skipif(not shutil.which("sh"), reason="no sh")
def test_shell_script_parses_with_sh_n(enrolling, tmp_path):
    for os_kind in ("linux", "macos"):
        token = new_token(enrolling)["token"]
        path = tmp_path / f"{os_kind}.sh"
        path.write_bytes(fetch_script(enrolling, os_kind, token)[1])
        result = subprocess.run(["sh", "-n", str(path)], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr


def _run_script(script: bytes, root: Path, **env: str) -> subprocess.CompletedProcess[str]:
    path = root.parent / "enroll.sh"
    path.write_bytes(script)
    environment = {"PATH": os.environ["PATH"], "SENSOR_INSTALL_ROOT": str(root), "SENSOR_SKIP_SERVICE": "1", **env}
    return subprocess.run(["sh", str(path)], capture_output=True, text=True, env=environment, timeout=60)


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


@pytest.mark.skipif(not shutil.which("curl") or os.uname().sysname != "Linux", reason="needs curl on Linux")
def test_linux_script_installs_into_a_temp_root_and_the_agent_streams(enrolling, tmp_path):
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "machine-id").write_text("0123456789abcdef0123456789abcdef\n")
    token = new_token(enrolling)["token"]
    result = _run_script(fetch_script(enrolling, "linux", token)[1], root)
    assert result.returncode == 0, result.stderr + result.stdout

    etc = root / "etc" / "sensor-agent"
    certs = etc / "certs"
    assert _mode(etc) == 0o700 and _mode(certs) == 0o700
    for name in ("ca.pem", "agent.pem", "agent.key"):
        assert _mode(certs / name) == 0o600, name
    assert (certs / "ca.pem").read_bytes() == enrolling.app.ca.ca_pem
    binary = root / "usr" / "local" / "bin" / "sensor-agent"
    assert binary.read_bytes() == AGENT_LINUX and _mode(binary) == 0o755
    config = (etc / "agent.yaml").read_text()
    assert _mode(etc / "agent.yaml") == 0o600
    assert f"target_url: https://localhost:{enrolling.app.grpc_port}\n" in config
    assert "machine_id: 0123456789abcdef0123456789abcdef\n" in config
    assert "server_name: sensor-appliance\n" in config
    unit = root / "etc" / "systemd" / "system" / "sensor-agent.service"
    assert _mode(unit) == 0o644
    # Under SENSOR_INSTALL_ROOT every path written and printed is the installed one, under the root.
    assert f"ExecStart={binary} --config {etc}/agent.yaml" in unit.read_text()
    assert f"ca_cert: {certs}/ca.pem\n" in config and f"key: {certs}/agent.key\n" in config
    assert f"certificates written to {certs}" in result.stdout and f"agent installed at {binary}" in result.stdout
    assert "verified /static/agents/linux-amd64/sensor-agent (sha256 " in result.stdout
    # The installed unit carries the same hardening as the unit shipped in systemd/.
    shipped = (Path(__file__).resolve().parents[3] / "systemd" / "sensor-agent.service").read_text()
    directives = {line for line in shipped.splitlines()
                  if "=" in line and not line.startswith(("#", "Description", "ExecStart"))}
    assert directives <= set(unit.read_text().splitlines())
    assert not list(root.rglob("*.part*"))

    # The installed certificate is an agent identity the appliance accepts over mTLS.
    cert = (certs / "agent.pem").read_bytes()
    key = (certs / "agent.key").read_bytes()
    stub = sensor_pb2_grpc.SensorServiceStub(enrolling.channel(cert=(cert, key)))
    reply = stub.StreamPacketBatches(iter([sensor_pb2.PacketBatch(packets=[wire.packet()])]),
                                     metadata=[("x-machine-id", "0123456789abcdef0123456789abcdef")])
    assert reply.packets_received == 1
    # And the agent, started with the written configuration as the unit starts it, reads its files and streams.
    replay = subprocess.run([sys.executable, "-m", "agents", "--config", str(etc / "agent.yaml"), "--pcap",
                             str(PCAP)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert replay.returncode == 0, replay.stderr
    assert json.loads(replay.stdout)["appliance_received"] > 0

    # Re-running with a new token replaces the certificate and keeps the machine id.
    token2 = new_token(enrolling)["token"]
    result = _run_script(fetch_script(enrolling, "linux", token2)[1], root)
    assert result.returncode == 0, result.stderr
    assert (certs / "agent.pem").read_bytes() != cert
    assert "machine_id: 0123456789abcdef0123456789abcdef\n" in (etc / "agent.yaml").read_text()
    assert x509.load_pem_x509_certificate((certs / "agent.pem").read_bytes()).subject.rfc4514_string() == \
        f"CN=sensor-agent-{token2[:6]}"


@pytest.mark.skipif(not shutil.which("curl"), reason="needs curl")
def test_linux_script_refuses_a_server_with_another_key(enrolling, tmp_path):
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "machine-id").write_text("abc\n")
    script = fetch_script(enrolling, "linux", new_token(enrolling)["token"])[1].decode()
    script = re.sub(r"SERVER_PIN='[^']+'", "SERVER_PIN='" + "A" * 43 + "='", script)
    result = _run_script(script.encode(), root)
    assert result.returncode != 0
    assert "cannot download /static/agents/linux-amd64/sensor-agent" in result.stderr
    assert not (root / "usr" / "local" / "bin" / "sensor-agent").exists()


@pytest.mark.skipif(not shutil.which("curl") or not shutil.which("bash"), reason="needs curl and bash")
def test_unix_one_line_command_fetches_over_the_pinned_key_and_runs(enrolling, tmp_path):
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "machine-id").write_text("feedface\n")
    command = new_token(enrolling)["command_unix"]
    assert command.endswith(" | " + RUN_AS_ROOT)
    env = {"PATH": os.environ["PATH"], "SENSOR_INSTALL_ROOT": str(root), "SENSOR_SKIP_SERVICE": "1"}
    # Run as written: the test is root, so the command takes plain sh, no sudo.
    result = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert (root / "etc" / "sensor-agent" / "certs" / "agent.pem").exists()
    # The same command pinned to another key fetches nothing (curl stops at the handshake).
    fresh = new_token(enrolling)
    wrong = re.sub(r"sha256//[^']+", "sha256//" + "B" * 43 + "=", fresh["command_unix"][: -len(RUN_AS_ROOT)] + "cat")
    result = subprocess.run(["sh", "-c", wrong], capture_output=True, text=True, env=env, timeout=60)
    assert "pinned public key" in result.stderr and result.stdout == ""
    assert fetch_script(enrolling, "linux", fresh["token"])[0] == 200  # the token was never presented


def test_linux_script_stops_when_not_root_and_no_install_root(enrolling, tmp_path):
    script = fetch_script(enrolling, "linux", new_token(enrolling)["token"])[1]
    command = ["sh", "-s"]
    if os.geteuid() == 0:  # run it as nobody, the script read from stdin
        if not shutil.which("setpriv"):
            pytest.skip("running as root without setpriv: cannot drop privileges")
        command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] + command
    result = subprocess.run(command, input=script, capture_output=True, env={"PATH": os.environ["PATH"]},
                            cwd="/", timeout=30)
    assert result.returncode == 1 and b"run this as root" in result.stderr, result.stderr


# -- rendering safety ------------------------------------------------------------------------------
def test_templates_refuse_unquoted_and_unknown_placeholders(tmp_path):
    bad = tmp_path / "bad.ps1"
    bad.write_text("$x = {{PRODUCT}}\n")
    with pytest.raises(TemplateError, match="inside single quotes"):
        Template.load(bad, quote_powershell)
    bad.write_text("$x = '{{EVIL}}'\n")
    with pytest.raises(TemplateError, match="unknown slot EVIL"):
        Template.load(bad, quote_powershell)


@pytest.mark.parametrize("value", ["x'; Remove-Item C:\\ -Recurse; '", "a\u2019b", "$(whoami)", "a b", "", "A" * 65])
def test_hostile_values_never_reach_a_script(value):
    for rel, quote in (("windows/enroll.ps1", quote_powershell), ("unix/enroll.sh", quote_sh)):
        template = Template.load(INSTALLER / rel, quote)
        values = {slot: "x" for slot in template.slots()}
        values["PRODUCT"] = value
        with pytest.raises(TemplateError):
            template.render(values)


def test_quoting_doubles_every_powershell_quote_and_closes_sh_quotes():
    assert quote_powershell("a'b\u2018c") == "a''b\u2018\u2018c"
    assert quote_sh("a'b") == "a'\\''b"


@pytest.mark.skipif(not shutil.which("shellcheck"), reason="shellcheck not installed (apt-get install shellcheck)")
def test_rendered_shell_script_passes_shellcheck(enrolling, tmp_path):
    path = tmp_path / "enroll.sh"
    path.write_bytes(fetch_script(enrolling, "linux", new_token(enrolling)["token"])[1])
    result = subprocess.run(["shellcheck", "-s", "sh", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def _powershell_structure(script: str) -> str:
    """The script without comments and string literals: what is left must nest properly."""
    out, i, n = [], 0, len(script)
    while i < n:
        char = script[i]
        if char == "#":  # a comment runs to the end of the line
            while i < n and script[i] != "\n":
                i += 1
        elif char == "'":  # single-quoted: '' is an escaped quote
            i += 1
            while i < n and not (script[i] == "'" and script[i + 1 : i + 2] != "'"):
                i += 2 if script[i] == "'" else 1
            i += 1
        elif char == '"':  # double-quoted: backtick escapes
            i += 1
            while i < n and script[i] != '"':
                i += 2 if script[i] == "`" else 1
            i += 1
        else:
            out.append(char)
            i += 1
    return "".join(out)


def test_rendered_powershell_script_nests_properly(appliance):
    # pwsh is not installable here (not in Debian); this is the structural check we can make.
    put_payload(appliance, driver=True)
    script = fetch_script(appliance, "windows", new_token(appliance)["token"])[1].decode()
    stack: list[str] = []
    pairs = {")": "(", "}": "{", "]": "["}
    for char in _powershell_structure(script):
        if char in "({[":
            stack.append(char)
        elif char in pairs:
            assert stack and stack[-1] == pairs[char], "unbalanced " + char
            stack.pop()
    assert stack == []
    assert script.rstrip().endswith("}")  # the whole script is one scriptblock: a cut download runs nothing


@pytest.mark.skipif(not shutil.which("curl"), reason="needs curl")
def test_linux_script_stops_when_a_download_does_not_match_the_payload_manifest(enrolling, tmp_path):
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "machine-id").write_text("abc\n")
    script = fetch_script(enrolling, "linux", new_token(enrolling)["token"])[1]
    # The file changes on the appliance after the script was issued (a tampered or half-written payload).
    served = enrolling.app.extras["artifacts"].resolve("agents/linux-amd64/sensor-agent")
    served.write_bytes(b"#!/bin/sh\necho swapped\n")
    result = _run_script(script, root)
    assert result.returncode != 0
    assert "/static/agents/linux-amd64/sensor-agent does not match the payload manifest" in result.stderr
    assert not (root / "usr" / "local" / "bin" / "sensor-agent").exists()
    assert not list(root.rglob("*.part*"))
