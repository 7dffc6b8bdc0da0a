"""The package as built by `make deb`, and Debian roots (debootstrap'd, cached) to install it into."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BASE_TAR = ROOT / "var/cache/debootstrap/bookworm-base.tar"
ARCH = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True).stdout.strip() or "amd64"
AGENT = ROOT / f"var/static/agents/linux-{ARCH}/sensor-agent"
CONSOLE = ROOT / "console/dist/index.html"
PACKAGE = "sensor-appliance"


def run(cmd: list[str], *, env: dict[str, str] | None = None, timeout: float = 900) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)
    assert done.returncode == 0, f"{cmd} exited {done.returncode}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done.stdout


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class DebBuild:
    deb: Path
    keys: Path  # the archive signing key (a test key: never the developer's var/packaging)
    env: dict[str, str]

    def repo(self, directory: Path, *debs: Path) -> Path:
        run([str(ROOT / "packaging/deb/repo.sh"), str(directory), *map(str, debs)], env=self.env)
        return directory


def rebuilt_as(deb: Path, revision: str, out: Path) -> Path:
    """The same payload as a newer Debian revision: what the next release looks like to apt."""
    tree = out / f"tree-{revision}"
    run(["dpkg-deb", "-R", str(deb), str(tree)])
    control = tree / "DEBIAN/control"
    lines = [f"Version: 0.1.0-{revision}" if line.startswith("Version:") else line
             for line in control.read_text().splitlines()]
    control.write_text("\n".join(lines) + "\n")
    newer = out / f"{PACKAGE}_0.1.0-{revision}_{ARCH}.deb"
    run(["dpkg-deb", "--root-owner-group", "-Zzstd", "--build", str(tree), str(newer)])
    shutil.rmtree(tree)
    return newer


@pytest.fixture(scope="session")
def deb_build(tmp_path_factory: pytest.TempPathFactory) -> DebBuild:
    """`make deb`'s two steps from this tree, with a throwaway archive key."""
    if not AGENT.exists() or not CONSOLE.exists():
        run(["make", "agents", "console"])
    keys = tmp_path_factory.mktemp("archive-keys")
    env = dict(os.environ, PACKAGING_KEYS=str(keys), REPO_KEYRING=str(keys / "archive-keyring.gpg"))
    run([str(ROOT / "packaging/deb/repo.sh"), "--key"], env=env)
    out = tmp_path_factory.mktemp("deb")
    deb = Path(run([str(ROOT / "packaging/deb/build.sh"), str(out)], env=env).strip().splitlines()[-1])
    assert deb.is_file() and deb.name == f"{PACKAGE}_0.1.0-1_{ARCH}.deb"
    return DebBuild(deb, keys, env)


class DebianRoot:
    """A debootstrap'd Debian bookworm (python3 + systemd) to run commands in with chroot."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __truediv__(self, inside: str) -> Path:
        return self.path / inside.lstrip("/")

    def chroot(self, *cmd: str, user: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        spec = [f"--userspec={user}:{user}"] if user else []
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "DEBIAN_FRONTEND": "noninteractive"}
        done = subprocess.run(["/usr/sbin/chroot", *spec, str(self.path), *cmd], capture_output=True, text=True, env=env,
                              timeout=600)
        if check:
            assert done.returncode == 0, f"{cmd} exited {done.returncode}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
        return done

    def popen(self, *cmd: str, user: str, env: dict[str, str]) -> subprocess.Popen[str]:
        return subprocess.Popen(["/usr/sbin/chroot", f"--userspec={user}:{user}", str(self.path), *cmd], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def fresh_root(parent: Path) -> Path:
    """A root from the cached debootstrap tarball (made on first use: about 2 minutes)."""
    run([str(ROOT / "packaging/base-root.sh"), str(BASE_TAR)])
    path = parent / "root"
    path.mkdir()
    run(["tar", "-C", str(path), "--numeric-owner", "-xpf", str(BASE_TAR)])
    shutil.copy("/etc/resolv.conf", path / "etc/resolv.conf")
    return path


@pytest.fixture()
def debian_root(tmp_path: Path) -> DebianRoot:
    return DebianRoot(fresh_root(tmp_path))
