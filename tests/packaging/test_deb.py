"""The .deb on a real Debian: install, run as the service user, upgrade from the signed repository, purge."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import ssl
import urllib.request
from pathlib import Path

import pytest

from tests.packaging.conftest import PACKAGE, ROOT, DebBuild, DebianRoot, free_port, fresh_root, rebuilt_as, run
from tests.polling import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]
STATE = "/var/lib/sensor-appliance"
KEYRING = f"/usr/share/keyrings/{PACKAGE}-archive-keyring.gpg"
# The package ships every unit in systemd/ that runs its venv (packaging/deb/build.sh).
UNITS = sorted(p.name for p in (ROOT / "systemd").glob("*.service")
               if "ExecStart=/opt/sensor-appliance/venv/" in p.read_text())


def installed_version(root: DebianRoot) -> str:
    done = root.chroot("dpkg-query", "-W", "-f=${Status} ${Version}", PACKAGE, check=False)
    return done.stdout if done.returncode == 0 else ""


def tree_digest(path: Path) -> dict[str, str]:
    """Every file under `path` by content: an upgrade that keeps data leaves this unchanged."""
    return {str(f.relative_to(path)): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(path.rglob("*")) if f.is_file()}


def fetch(url: str, cafile: Path) -> bytes | None:
    try:
        with urllib.request.urlopen(url, context=ssl.create_default_context(cafile=str(cafile)), timeout=5) as reply:
            return bytes(reply.read())
    except OSError:
        return None


def serve_once(root: DebianRoot) -> dict[str, object]:
    """Start the installed appliance and console as the `sensor` user with the installed config; read
    /api/status and the console's page; stop both."""
    ports = {"grpc": free_port(), "rest": free_port(), "dashboard": free_port()}
    config = root / "/etc/sensor-appliance/config.yaml"
    text = config.read_text()
    for section, port in ports.items():  # fresh loopback ports each run
        text = re.sub(rf'^({section}:\n  listen: )"[^"]*"', rf'\g<1>"127.0.0.1:{port}"', text, flags=re.MULTILINE)
    config.write_text(text)  # a local edit of the conffile: the upgrade must keep it
    env = {"PATH": "/usr/bin:/bin", "HOME": STATE, "LANG": "C.UTF-8"}
    python, conf = "/opt/sensor-appliance/venv/bin/python", "/etc/sensor-appliance/config.yaml"
    ca = root / f"{STATE}/certs/ca.pem"
    procs = [root.popen(python, "-m", "appliance", "--config", conf, user="sensor", env=env)]
    try:
        def answering(url: str) -> bytes | None:
            for proc in procs:
                if proc.poll() is not None:
                    raise AssertionError(f"{proc.args} exited {proc.returncode}: {proc.stdout.read() if proc.stdout else ''}")
            return fetch(url, ca) if ca.exists() else None

        status = wait_for(lambda: answering(f"https://localhost:{ports['rest']}/api/status"), timeout=120, interval=0.5)
        assert status, "no status answer within 120 s"
        service_uid = (root / STATE).stat().st_uid
        assert int(Path(f"/proc/{procs[0].pid}/status").read_text().split("Uid:")[1].split()[0]) == service_uid != 0
        # The console: the packaged web app (console/dist), served by the packaged dashboard.
        procs.append(root.popen(python, "-m", "appliance.dashboard", "--config", conf, user="sensor", env=env))
        page = wait_for(lambda: answering(f"https://localhost:{ports['dashboard']}/"), timeout=120, interval=0.5)
        assert page and b"<script" in page, page
        assert (root / f"{STATE}/console-admin.password").stat().st_mode & 0o777 == 0o600
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        codes = [proc.wait(60) for proc in procs]
    assert codes == [0] * len(procs)
    return dict(json.loads(status))


def test_installs_runs_as_its_user_upgrades_from_the_signed_repository_and_purges(
        deb_build: DebBuild, debian_root: DebianRoot, tmp_path: Path) -> None:
    root = debian_root
    shutil.copy(deb_build.deb, root / "/tmp/")
    out = root.chroot("dpkg", "-i", f"/tmp/{deb_build.deb.name}").stdout
    assert "FIRST-LOGIN.txt" in out
    assert installed_version(root) == "install ok installed 0.1.0-1"
    # The service user, private state, root-only secrets file, units enabled, the agent in /static.
    assert root.chroot("id", "-u", "sensor").stdout.strip() != "0"
    assert (root / STATE).stat().st_mode & 0o777 == 0o700
    env_file = root / "/etc/sensor-appliance/environment"
    assert env_file.stat().st_mode & 0o777 == 0o600 and env_file.stat().st_uid == 0
    for unit in UNITS:
        assert (root / f"/etc/systemd/system/multi-user.target.wants/{unit}").is_symlink()
    assert os.access(root / f"{STATE}/static/agents/linux-amd64/sensor-agent", os.X_OK)
    # The send-buffer ceiling the analysis channel asks for, applied at boot (a chroot's postinst leaves the host alone).
    from appliance.analysis.channel import SEND_BUFFER

    assert f"net.core.wmem_max = {SEND_BUFFER}\n" in (root / "/usr/lib/sysctl.d/60-sensor-appliance.conf").read_text()

    assert serve_once(root)["status"] == "Running"
    for secret in ("admin.token", "certs/ca.key"):
        assert (root / f"{STATE}/{secret}").stat().st_mode & 0o777 == 0o600
    data_before = {k: v for k, v in tree_digest(root / STATE).items() if not k.startswith("static/")}
    assert "admin.token" in data_before and "certs/ca.pem" in data_before
    config_before = (root / "/etc/sensor-appliance/config.yaml").read_text()

    # The next release arrives through the signed repository named in a deb822 entry with Signed-By.
    newer = rebuilt_as(deb_build.deb, "2", tmp_path)
    deb_build.repo(root / "/srv/repo", newer)
    (root / "/etc/apt/sources.list").unlink()  # offline: only our repository
    (root / f"/etc/apt/sources.list.d/{PACKAGE}.sources").write_text(
        f"Types: deb\nURIs: file:/srv/repo\nSuites: ./\nSigned-By: {KEYRING}\n")
    root.chroot("apt-get", "update")
    root.chroot("apt-get", "-y", "upgrade")
    assert installed_version(root) == "install ok installed 0.1.0-2"
    assert (root / "/etc/sensor-appliance/config.yaml").read_text() == config_before
    assert {k: v for k, v in tree_digest(root / STATE).items() if k in data_before} == data_before
    assert serve_once(root)["status"] == "Running"  # the upgraded build runs on the kept data

    # remove keeps the data and the user; purge takes everything.
    root.chroot("apt-get", "-y", "remove", PACKAGE)
    assert (root / f"{STATE}/admin.token").exists() and not (root / "/opt/sensor-appliance/venv").exists()
    root.chroot("apt-get", "-y", "purge", PACKAGE)
    assert installed_version(root) == ""
    for gone in (STATE, "/etc/sensor-appliance", "/opt/sensor-appliance"):
        assert not (root / gone).exists(), gone
    assert root.chroot("id", "sensor", check=False).returncode != 0
    assert not any((root / "/etc/systemd/system").rglob("sensor-*"))
    assert not (root / "/usr/lib/sysctl.d/60-sensor-appliance.conf").exists()


def _unsigned(repo: Path, other_keys: DebBuild) -> None:
    (repo / "InRelease").unlink()
    (repo / "Release.gpg").unlink()


def _bad_signature(repo: Path, other_keys: DebBuild) -> None:
    text = (repo / "InRelease").read_text()
    (repo / "InRelease").write_text(text.replace("Label: sensor-appliance", "Label: sensor-appliancf"))


def _tampered_index(repo: Path, other_keys: DebBuild) -> None:
    packages = (repo / "Packages").read_text().replace("Version: 0.1.0-2", "Version: 0.1.0-3")
    (repo / "Packages").write_text(packages)
    (repo / "Packages.gz").unlink()


def _foreign_key(repo: Path, other_keys: DebBuild) -> None:
    for name in ("InRelease", "Release.gpg"):
        (repo / name).unlink()
    env = dict(other_keys.env, GNUPGHOME=str(repo.parent / "foreign-gnupg"))
    Path(env["GNUPGHOME"]).mkdir(mode=0o700, exist_ok=True)
    run(["gpg", "--batch", "--passphrase", "", "--quick-gen-key", "Mallory <m@localhost>", "ed25519", "sign", "never"], env=env)
    run(["gpg", "--batch", "--clearsign", "-o", str(repo / "InRelease"), str(repo / "Release")], env=env)
    run(["gpgconf", "--kill", "gpg-agent"], env=env)


@pytest.fixture(scope="module")
def installed_root(deb_build: DebBuild, tmp_path_factory: pytest.TempPathFactory) -> DebianRoot:
    """One root with 0.1.0-1 installed and apt pointed at /srv/repo only, for the refusal cases."""
    root = DebianRoot(fresh_root(tmp_path_factory.mktemp("refusals")))
    shutil.copy(deb_build.deb, root / "/tmp/")
    root.chroot("dpkg", "-i", f"/tmp/{deb_build.deb.name}")
    (root / "/etc/apt/sources.list").unlink()
    (root / f"/etc/apt/sources.list.d/{PACKAGE}.sources").write_text(
        f"Types: deb\nURIs: file:/srv/repo\nSuites: ./\nSigned-By: {KEYRING}\n")
    return root


@pytest.fixture(scope="module")
def signed_repo(deb_build: DebBuild, tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("signed-repo")
    return deb_build.repo(work / "repo", rebuilt_as(deb_build.deb, "2", work))


@pytest.mark.parametrize(("spoil", "reason"), [
    (_unsigned, "is not signed"), (_bad_signature, "BADSIG"), (_tampered_index, "Hash Sum mismatch"),
    (_foreign_key, "NO_PUBKEY")], ids=["unsigned", "bad-signature", "tampered-index", "foreign-key"])
def test_an_unsigned_or_tampered_repository_is_refused(deb_build: DebBuild, installed_root: DebianRoot,
                                                       signed_repo: Path, spoil, reason: str) -> None:
    root = installed_root
    repo = root / "/srv/repo"
    shutil.rmtree(repo, ignore_errors=True)
    shutil.rmtree(root / "/var/lib/apt/lists", ignore_errors=True)
    (root / "/var/lib/apt/lists/partial").mkdir(parents=True)
    shutil.copytree(signed_repo, repo)
    spoil(repo, deb_build)
    update = root.chroot("apt-get", "update", check=False)
    assert update.returncode != 0 and reason in update.stdout + update.stderr, update.stdout + update.stderr
    root.chroot("apt-get", "-y", "upgrade", check=False)
    assert installed_version(root) == "install ok installed 0.1.0-1"


def test_the_untouched_repository_is_accepted(installed_root: DebianRoot, signed_repo: Path) -> None:
    """The refusals above are refusals of the damage, not of every repository: run last, it upgrades."""
    repo = installed_root / "/srv/repo"
    shutil.rmtree(repo, ignore_errors=True)
    shutil.copytree(signed_repo, repo)
    installed_root.chroot("apt-get", "update")
    installed_root.chroot("apt-get", "-y", "upgrade")
    assert installed_version(installed_root) == "install ok installed 0.1.0-2"
