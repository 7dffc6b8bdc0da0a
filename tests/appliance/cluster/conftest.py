"""Fixtures for the cluster: a real redis-server on a free loopback port, and real nodes
(`python -m appliance`, one process per role, each with its own config file and state directory)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
import redis

from appliance.cluster import bus
from appliance.generated import sensor_pb2_grpc
from appliance.pki import CertificateAuthority, default_server_names
from tests.appliance.detection.conftest import RULES
from tests.conftest import Rest
from tests.polling import free_port, wait_port

ROOT = Path(__file__).resolve().parents[3]
TOKEN = "cluster-test-admin-token-0123456789"
SERVER_NAMES = ["localhost", "127.0.0.1"]




class RedisServer:
    """A real redis-server from Debian on a loopback port, in a temp dir (stop and start again at will)."""

    def __init__(self, directory: Path, port: int | None = None) -> None:
        self.dir = directory
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        if not os.path.exists(binary):
            pytest.fail("redis-server is not installed (TEST_APT_PACKAGES has it; run make sysdeps-test)")
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir), "--save", "",
             "--appendonly", "no", "--daemonize", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def client(self) -> Any:
        return redis.Redis.from_url(self.url)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path).start()
    try:
        yield server
    finally:
        server.stop()


@dataclass
class Node:
    """One `python -m appliance` process of the cluster."""

    name: str
    role: str
    proc: subprocess.Popen[bytes]
    log: Path
    grpc_port: int = 0
    rest: Rest | None = None
    ca: CertificateAuthority | None = None
    node_id: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stub(self, agent: str = "sensor-agent-test00") -> Any:
        assert self.ca is not None
        issued = self.ca.issue_agent(agent)
        creds = grpc.ssl_channel_credentials(self.ca.ca_pem, issued.key_pem, issued.cert_pem)
        channel = grpc.secure_channel(f"127.0.0.1:{self.grpc_port}", creds,
                                      options=[("grpc.ssl_target_name_override", "localhost")])
        return sensor_pb2_grpc.SensorServiceStub(channel)

    def metrics(self) -> dict[str, Any]:
        assert self.rest is not None
        status, body = self.rest.get("/api/v1/metrics")
        assert status == 200, body
        return body

    def stop(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return int(self.proc.returncode)


class Cluster:
    """Starts nodes that share one CA (created here first) and the shipped rules."""

    def __init__(self, tmp: Path, redis_url: str) -> None:
        self.tmp = tmp
        self.redis_url = redis_url
        self.certs = tmp / "certs"
        self.ca = CertificateAuthority.ensure(self.certs, list(dict.fromkeys(SERVER_NAMES + default_server_names())))
        self.rules = tmp / "rules"
        self.rules.mkdir(exist_ok=True)
        for rule in RULES.glob("*.yaml"):
            shutil.copy(rule, self.rules / rule.name)
        self.nodes: list[Node] = []

    def start(self, name: str, role: str, wait: bool = True, sections: dict[str, Any] | None = None,
              **cluster: Any) -> Node:
        state = self.tmp / name
        state.mkdir()
        node_id = f"{name}-node"
        config = {
            "grpc": {"listen": "127.0.0.1:0"},
            "rest": {"listen": "127.0.0.1:0", "threads": 4, "check_replies": True},
            "paths": {"state_dir": str(state), "signatures_dir": str(self.rules), "static_dir": str(state / "static"),
                      "certs_dir": str(self.certs)},
            "tls": {"server_names": SERVER_NAMES},
            "metrics": {"history_interval": 1},
            "cluster": {"role": role, "redis_url": self.redis_url, "node_id": node_id, **cluster},
        }
        for section, values in (sections or {}).items():
            config.setdefault(section, {}).update(values)
        path = state / "config.yaml"
        path.write_text(json.dumps(config))  # JSON is YAML
        log = state / "output.log"
        env = {**os.environ, "SENSOR_ADMIN_TOKEN": TOKEN}
        with log.open("wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "appliance", "--config", str(path)], cwd=ROOT, env=env,
                                    stdout=out, stderr=subprocess.STDOUT)
        node = Node(name, role, proc, log, ca=self.ca, node_id=node_id)
        self.nodes.append(node)
        if wait:
            self.wait_ready(node)
        return node

    def wait_ready(self, node: Node, timeout: float = 90) -> Node:
        deadline = time.monotonic() + timeout
        ready = "running on" if node.role == "analyzer" else "authenticate"
        while time.monotonic() < deadline:
            text = node.output()
            if ready in text:
                break
            if node.proc.poll() is not None:
                raise AssertionError(f"{node.name} exited with {node.proc.returncode}:\n{text}")
            time.sleep(0.1)
        else:
            raise AssertionError(f"{node.name} not ready in {timeout} s:\n{node.output()}")
        if node.role != "analyzer":
            grpc_port = re.search(r"gRPC ingestion : port (\d+)", text)
            rest_port = re.search(r"https://localhost:(\d+)/api/status", text)
            assert grpc_port and rest_port, text
            node.grpc_port = int(grpc_port.group(1))
            context = ssl.create_default_context(cafile=str(self.certs / "ca.pem"))
            node.rest = Rest(f"https://localhost:{rest_port.group(1)}", TOKEN, context)
        return node

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.stop()


@pytest.fixture
def cluster(tmp_path: Path, redis_server: RedisServer) -> Iterator[Cluster]:
    running = Cluster(tmp_path, redis_server.url)
    try:
        yield running
    finally:
        running.stop()


def lone_analyzer(tmp_path: Path, redis_server: RedisServer, partitions: int) -> tuple[Any, Any]:
    """(an analyzer "a1", not started, a client) on a Redis laid out for `partitions`, its groups made: entries
    a test adds to a partition's stream before start() are what it reads first."""
    from appliance.cluster.analyzer import Analyzer
    from tests.conftest import appliance_settings

    (tmp_path / "signatures").mkdir()
    settings = appliance_settings(tmp_path, cluster={"role": "analyzer", "redis_url": redis_server.url,
                                                     "partitions": partitions, "node_id": "a1", "lease_seconds": 2})
    client = redis_server.client()
    bus.agree_on_layout(client, partitions)
    bus.ensure_groups(client, partitions)
    return Analyzer(settings), client


def redis_totals(client: Any, partitions: int) -> dict[str, int]:
    """The partitions' counters summed (added, trimmed, analysed, duplicates, per analyzer too)."""
    return bus.partition_counts(client, partitions)


def pending(client: Any, partitions: int, consumer: str | None = None) -> int:
    """Entries read and not committed, over the partitions (of one consumer when given)."""
    total = 0
    for p in range(partitions):
        try:
            if consumer is None:
                total += int(client.xpending(bus.flows_key(p), bus.GROUP)["pending"])
            else:
                rows = client.xpending_range(bus.flows_key(p), bus.GROUP, "-", "+", 10_000, consumername=consumer)
                total += len(rows)
        except redis.ResponseError:
            pass
    return total
