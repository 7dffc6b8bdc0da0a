"""Fixtures for the concierge: real servers on port 0, real SQLite files in tmp dirs, clients per role."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import requests

from concierge.app import Concierge, build
from concierge.pms import SimulatedPms
from concierge.pubsub import InProcessPubSub, PubSub, RedisPubSub
from concierge.settings import Settings
from tests.polling import free_port, wait_port

PASSWORD = "correct horse battery"
ROLES = ("guest", "staff", "manager", "admin", "owner")


class Client:
    """A browser-like client: keeps the session cookie and sends the CSRF token on state changes."""

    def __init__(self, base: str, origin: str | None = None, verify: Path | None = None) -> None:
        self.base = base
        self.http = requests.Session()
        self.verify: str | bool = str(verify) if verify is not None else True  # per request: env CA bundles override Session.verify
        self.csrf: str | None = None
        self.origin = origin
        self.me: dict[str, Any] = {}

    def request(self, method: str, path: str, csrf: bool = True, **kw: Any) -> requests.Response:
        headers = dict(kw.pop("headers", {}) or {})
        if csrf and self.csrf and method in ("POST", "PUT", "PATCH", "DELETE"):
            headers.setdefault("X-CSRF-Token", self.csrf)
        if self.origin:
            headers.setdefault("Origin", self.origin)
        return self.http.request(method, self.base + path, headers=headers, timeout=30, verify=self.verify, **kw)

    def get(self, path: str, **kw: Any) -> requests.Response:
        return self.request("GET", path, **kw)

    def post(self, path: str, json: Any = None, **kw: Any) -> requests.Response:
        return self.request("POST", path, json=json, **kw)

    def put(self, path: str, json: Any = None, **kw: Any) -> requests.Response:
        return self.request("PUT", path, json=json, **kw)

    def patch(self, path: str, json: Any = None, **kw: Any) -> requests.Response:
        return self.request("PATCH", path, json=json, **kw)

    def delete(self, path: str, **kw: Any) -> requests.Response:
        return self.request("DELETE", path, **kw)

    def sign_in(self, email: str, password: str = PASSWORD) -> Client:
        resp = self.post("/users/sign-in", {"email": email, "password": password})
        assert resp.status_code == 200, resp.text
        self.me = resp.json()
        self.csrf = self.me["csrfToken"]
        return self

    @property
    def cookie(self) -> str:
        return self.http.cookies.get("concierge_session") or ""


@dataclass
class Hotel:
    """A demo organization with one signed-in client per role and helpers to make more."""

    concierge: Concierge
    base: str
    org_id: str
    clients: dict[str, Client]
    emails: dict[str, str]
    verify: Path | None = None  # CA file when the base URL is https (nginx in front)

    def client(self, role: str) -> Client:
        return self.clients[role]

    def anonymous(self) -> Client:
        return Client(self.base, verify=self.verify)

    def new_user(self, role: str, name: str) -> tuple[str, str]:
        """Create an account with a membership; returns (user_id, email)."""
        return add_user(self.concierge, self.org_id, role, name)

    def guest_with_account(self, name: str = "Ada") -> tuple[dict[str, Any], Client]:
        """A cardex guest linked to a new guest account, and that account signed in."""
        user_id, email = self.new_user("guest", name)
        guest = self.client("staff").post("/cardex/guests", {"firstName": name, "lastName": "Lovelace", "room": "101", "userId": user_id, "email": email}).json()
        return guest, Client(self.base, verify=self.verify).sign_in(email)


def add_user(concierge: Concierge, org_id: str, role: str, name: str) -> tuple[str, str]:
    from concierge.clock import new_id

    users = concierge.services.users
    email = f"{name.lower().replace(' ', '.')}.{new_id('x')[2:10]}@hotel.test"
    now = concierge.clock.iso()
    user_id = users.store.create(email, name, concierge.services.hasher.hash(PASSWORD), None, now)
    users.store.add_member(org_id, user_id, role, now)
    return user_id, email


def settings_for(tmp: Path, **changes: Any) -> Settings:
    base = Settings(state_dir=tmp, kdf_n=2**10, sse_heartbeat_seconds=0.5, outbox_interval_seconds=0.2, check_responses=True)
    return base.with_(**changes)


@pytest.fixture
def make_concierge(tmp_path: Path) -> Iterator[Callable[..., tuple[Concierge, str]]]:
    """Factory: build and start a concierge on port 0; stopped at teardown."""
    started: list[Concierge] = []

    def make(state: Path | None = None, pms: SimulatedPms | None = None, **changes: Any) -> tuple[Concierge, str]:
        state = state or tmp_path / f"state{len(started)}"
        concierge = build(settings_for(state, **changes), pms=pms or SimulatedPms())
        port = concierge.start(0)
        started.append(concierge)
        return concierge, f"http://127.0.0.1:{port}"

    yield make
    for concierge in started:
        concierge.stop()


def make_hotel(concierge: Concierge, base: str, verify: Path | None = None) -> Hotel:
    owner = Client(base, verify=verify)
    email = f"owner.{os.urandom(4).hex()}@hotel.test"
    resp = owner.post("/users/sign-up", {"email": email, "password": PASSWORD, "name": "Olive Owner", "organizationName": "Hotel Demo"})
    assert resp.status_code == 201, resp.text
    org_id = resp.json()["auth"]["organizationId"]
    owner.sign_in(email)
    clients = {"owner": owner}
    emails = {"owner": email}
    for role in ROLES[:-1]:
        _, mail = add_user(concierge, org_id, role, f"{role.title()} Person")
        clients[role] = Client(base, verify=verify).sign_in(mail)
        emails[role] = mail
    return Hotel(concierge, base, org_id, clients, emails, verify)


@pytest.fixture
def hotel(make_concierge: Callable[..., tuple[Concierge, str]]) -> Hotel:
    concierge, base = make_concierge()
    return make_hotel(concierge, base)


@pytest.fixture(scope="module")
def shared_hotel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hotel]:
    """One hotel for a whole module of read-mostly tests (the many parametrized access/validation cases)."""
    concierge = build(settings_for(tmp_path_factory.mktemp("shared")), pms=SimulatedPms())
    port = concierge.start(0)
    try:
        yield make_hotel(concierge, f"http://127.0.0.1:{port}")
    finally:
        concierge.stop()


class SseClient:
    """Reads server-sent events over a raw HTTP/1.1 connection (chunked decoding by http.client)."""

    def __init__(self, base: str, cookie: str, last_event_id: str | None = None, timeout: float = 10, path: str = "/check-in/stream", ca: Path | None = None) -> None:
        scheme, _, hostport = base.partition("://")
        host, port = hostport.split(":")
        if scheme == "https":
            import ssl

            context = ssl.create_default_context(cafile=str(ca) if ca else None)
            self.conn: http.client.HTTPConnection = http.client.HTTPSConnection(host, int(port), timeout=timeout, context=context)
        else:
            self.conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
        headers = {"Cookie": f"concierge_session={cookie}", "Accept": "text/event-stream"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        self.conn.request("GET", path, headers=headers)
        self.response = self.conn.getresponse()
        self.status = self.response.status
        self.comments = 0

    def next_event(self) -> dict[str, Any]:
        """The next event as {id, event, data}; heartbeat comments are counted and skipped."""
        event: dict[str, Any] = {}
        while True:
            line = self.response.readline()
            if not line:
                raise EOFError("stream closed")
            text = line.decode().rstrip("\n")
            if text == "":
                if event:
                    return event
                continue
            if text.startswith(":"):
                self.comments += 1
                continue
            key, _, value = text.partition(": ")
            event[key] = json.loads(value) if key == "data" else (int(value) if key == "id" else value)

    def close(self) -> None:
        try:
            if self.conn.sock is not None:
                self.conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.conn.close()




@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """A real redis-server from Debian on a free loopback port, in a temp dir."""
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    if not os.path.exists(binary):
        pytest.fail("redis-server is not installed (concierge/concierge.mk adds it to TEST_APT_PACKAGES; run make sysdeps-test)")
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path), "--save", "", "--appendonly", "no", "--daemonize", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_port(port)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _postgres_bin() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"))
    return found[-1].parent if found else None


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    """A throwaway PostgreSQL server from Debian's packages on a free loopback port (trust auth, temp dir)."""
    import tempfile

    bindir = _postgres_bin()
    if bindir is None:
        pytest.fail("PostgreSQL is not installed (concierge/concierge.mk adds it to TEST_APT_PACKAGES; run make sysdeps-test)")
    root = Path(tempfile.mkdtemp(prefix="concierge-pg-"))
    data = root / "data"
    as_user: dict[str, Any] = {}
    if os.geteuid() == 0:  # initdb and postgres refuse to run as root
        shutil.chown(root, "postgres", "postgres")
        as_user = {"user": "postgres", "group": "postgres", "extra_groups": []}
    subprocess.run([str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **as_user)
    port = free_port()
    proc = subprocess.Popen(
        [str(bindir / "postgres"), "-D", str(data), "-p", str(port), "-h", "127.0.0.1", "-k", str(root), "-c", "fsync=off", "-c", "max_connections=60"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        **as_user,
    )
    try:
        wait_port(port, timeout=30)
        import psycopg

        deadline = time.monotonic() + 30
        while True:
            try:
                psycopg.connect(f"postgresql://postgres@127.0.0.1:{port}/postgres").close()
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        proc.send_signal(signal.SIGINT)  # fast shutdown
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(params=["in-process", "redis"])
def pubsub(request: pytest.FixtureRequest) -> Iterator[PubSub]:
    """Both pub/sub back ends with a replay list of 3 events (Redis: a real server)."""
    backend: PubSub
    if request.param == "redis":
        backend = RedisPubSub(request.getfixturevalue("redis_url"), replay_size=3)
    else:
        backend = InProcessPubSub(replay_size=3)
    yield backend
    backend.close()
