"""`python -m appliance.reprovision` against a release host served by the test on loopback."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from appliance.reprovision import main

TOKEN = "release-token-" + "r" * 20
PREFIX = "/sensor/stable"  # release.url carries a path; files live below it
REPO = Path(__file__).resolve().parents[3]


@dataclass
class ReleaseHost:
    """A release host: a manifest and files, Bearer-protected; it counts what it is asked."""

    files: dict[str, bytes] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    version: str = "1.0.0"
    lie_about: set[str] = field(default_factory=set)  # files whose content differs from the manifest
    requests: list[str] = field(default_factory=list)
    extra_entries: list[dict] = field(default_factory=list)
    url: str = ""

    def manifest(self) -> bytes:
        entries = [{"name": n, "size": len(d), "sha256": hashlib.sha256(d).hexdigest(),
                    "version": self.versions.get(n, self.version)} for n, d in self.files.items()]
        return json.dumps({"version": self.version, "files": entries + self.extra_entries}).encode()


@pytest.fixture
def release() -> Iterator[ReleaseHost]:
    host = ReleaseHost(files={"agents/linux-amd64/sensor-agent": b"\x7fELF linux agent v1",
                              "agents/windows-amd64/sensor-agent.exe": b"MZ windows agent v1",
                              "driver/sensor-driver.inf": b"[Version]\r\n"})

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            if not self.path.startswith(PREFIX + "/"):
                self.send_error(404)
                return
            host.requests.append(self.path[len(PREFIX):])
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                self.send_error(401)
                return
            path = self.path[len(PREFIX) + 1:]
            if path == "manifest.json":
                body = host.manifest()
            elif path in host.files:
                body = host.files[path] + (b"tampered" if path in host.lie_about else b"")
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host.url = f"http://127.0.0.1:{server.server_address[1]}{PREFIX}"
    try:
        yield host
    finally:
        server.shutdown()
        server.server_close()


def config(tmp_path: Path, url: str, static: Path | None = None) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({
        "paths": {"static_dir": str(static or tmp_path / "static"), "state_dir": str(tmp_path / "state"),
                  "certs_dir": str(tmp_path / "certs")},
        "release": {"url": url, "timeout": 30},  # loopback; generous for a loaded machine
    }))
    return path


@pytest.fixture
def token(monkeypatch):
    monkeypatch.setenv("SENSOR_RELEASE_TOKEN", TOKEN)


def snapshot(static: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(static)): (p.read_bytes(), p.stat().st_mtime_ns) for p in static.rglob("*") if p.is_file()}


def test_fills_an_empty_static_directory(tmp_path, release, token):
    assert main(["--config", str(config(tmp_path, release.url))]) == 0
    static = tmp_path / "static"
    for name, data in release.files.items():
        assert (static / name).read_bytes() == data
    manifest = json.loads((static / "manifest.json").read_text())
    assert manifest["version"] == "1.0.0"
    assert {f["name"]: f["version"] for f in manifest["files"]} == dict.fromkeys(release.files, "1.0.0")
    assert sorted(release.requests) == sorted(["/manifest.json"] + [f"/{n}" for n in release.files])
    assert not [p for p in static.rglob(".*")]


def test_an_up_to_date_directory_costs_one_manifest_request(tmp_path, release, token):
    cfg = config(tmp_path, release.url)
    assert main(["--config", str(cfg)]) == 0
    before = snapshot(tmp_path / "static")
    release.requests.clear()
    assert main(["--config", str(cfg)]) == 0
    assert release.requests == ["/manifest.json"]
    assert snapshot(tmp_path / "static") == before  # not even the manifest was rewritten


def test_only_changed_files_are_fetched_again(tmp_path, release, token):
    cfg = config(tmp_path, release.url)
    assert main(["--config", str(cfg)]) == 0
    release.files["agents/linux-amd64/sensor-agent"] = b"\x7fELF linux agent v2"
    release.version = "1.1.0"
    release.versions = {n: "1.0.0" for n in release.files if n != "agents/linux-amd64/sensor-agent"}
    release.requests.clear()
    assert main(["--config", str(cfg)]) == 0
    assert sorted(release.requests) == ["/agents/linux-amd64/sensor-agent", "/manifest.json"]
    assert (tmp_path / "static" / "agents/linux-amd64/sensor-agent").read_bytes() == b"\x7fELF linux agent v2"
    assert json.loads((tmp_path / "static" / "manifest.json").read_text())["version"] == "1.1.0"


def test_a_file_emptied_or_corrupted_on_disk_is_fetched_again(tmp_path, release, token):
    cfg = config(tmp_path, release.url)
    assert main(["--config", str(cfg)]) == 0
    (tmp_path / "static" / "driver/sensor-driver.inf").write_bytes(b"garbage, longer than before")
    release.requests.clear()
    assert main(["--config", str(cfg)]) == 0
    assert sorted(release.requests) == ["/driver/sensor-driver.inf", "/manifest.json"]
    assert (tmp_path / "static" / "driver/sensor-driver.inf").read_bytes() == b"[Version]\r\n"


def _provisioned(tmp_path, release) -> tuple[Path, dict]:
    cfg = config(tmp_path, release.url)
    assert main(["--config", str(cfg)]) == 0
    return cfg, snapshot(tmp_path / "static")


def _one_error(caplog) -> str:
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, errors
    return errors[0]


def test_an_unreachable_host_logs_one_line_and_exits_0(tmp_path, release, token, caplog):
    cfg, before = _provisioned(tmp_path, release)
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]  # bound, never listening: connections are refused
        config(tmp_path, f"http://127.0.0.1:{closed}")
        assert main(["--config", str(cfg)]) == 0
    assert "unreachable" in _one_error(caplog)
    assert snapshot(tmp_path / "static") == before


def test_a_refused_token_logs_one_line_and_exits_0(tmp_path, release, token, caplog, monkeypatch):
    cfg, before = _provisioned(tmp_path, release)
    monkeypatch.setenv("SENSOR_RELEASE_TOKEN", "wrong")
    release.files["agents/linux-amd64/sensor-agent"] = b"new"
    assert main(["--config", str(cfg)]) == 0
    assert "401" in _one_error(caplog) and "token" in _one_error(caplog)
    assert "wrong" not in _one_error(caplog)
    assert snapshot(tmp_path / "static") == before


def test_a_checksum_mismatch_keeps_the_good_file(tmp_path, release, token, caplog):
    cfg, before = _provisioned(tmp_path, release)
    release.files["agents/linux-amd64/sensor-agent"] = b"\x7fELF linux agent v2"
    release.lie_about = {"agents/linux-amd64/sensor-agent"}
    assert main(["--config", str(cfg)]) == 0
    line = _one_error(caplog)
    assert "agents/linux-amd64/sensor-agent" in line
    assert snapshot(tmp_path / "static") == before
    assert not [p for p in (tmp_path / "static").rglob(".*")]


def test_a_hostile_manifest_is_rejected_whole(tmp_path, release, token, caplog):
    cfg, before = _provisioned(tmp_path, release)
    release.extra_entries = [{"name": "../../escape", "size": 1, "sha256": "0" * 64},
                             {"name": "ca.pem", "size": 1, "sha256": "0" * 64}]
    assert main(["--config", str(cfg)]) == 0
    assert "release manifest rejected" in _one_error(caplog)
    assert not (tmp_path / "escape").exists()
    assert snapshot(tmp_path / "static") == before


def test_nothing_happens_without_the_release_token(tmp_path, release, monkeypatch):
    monkeypatch.delenv("SENSOR_RELEASE_TOKEN", raising=False)
    assert main(["--config", str(config(tmp_path, release.url))]) == 0
    assert release.requests == []


def test_plain_http_is_refused_beyond_this_machine(tmp_path, token, caplog):
    assert main(["--config", str(config(tmp_path, "http://releases.example.invalid/x"))]) == 0
    assert "plain http" in _one_error(caplog)


@pytest.mark.skipif(not shutil.which("unshare") or os.geteuid() != 0, reason="needs root and unshare for a tiny tmpfs")
def test_a_full_disk_logs_one_line_exits_0_and_keeps_good_files(tmp_path, release):
    static = tmp_path / "static"
    static.mkdir()
    cfg = config(tmp_path, release.url, static)
    release.files["agents/macos-arm64/sensor-agent"] = os.urandom(200 * 1024)  # larger than the 128 KiB disk
    script = (f"mount -t tmpfs -o size=128k tmpfs {static} && "
              f"printf good > {static}/keep.bin && "
              f"{sys.executable} -m appliance.reprovision --config {cfg}; rc=$?; "
              f"cat {static}/keep.bin; echo; find {static} -name '*.part'; exit $rc")
    env = dict(os.environ, SENSOR_RELEASE_TOKEN=TOKEN, PYTHONPATH=str(REPO))
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("mount namespaces are not available here")
    result = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, env=env,
                            timeout=60, cwd=REPO)
    assert result.returncode == 0, result.stderr
    errors = [line for line in result.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and "disk full" in errors[0], result.stderr
    listing = result.stdout.splitlines()
    assert listing[0] == "good"  # the file already there is untouched
    assert listing[1:] == []  # and no partial file is left behind
