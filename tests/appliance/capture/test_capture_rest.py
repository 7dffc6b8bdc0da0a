"""The capture's REST surface over the real server, without a namespace: listing, refusals, hostile bodies."""

from __future__ import annotations

import socket
import ssl

from tests.appliance.dashboard.conftest import Console, console  # noqa: F401 - the fixture
from tests.conftest import RunningAppliance

ROUTES = [("GET", "/api/v1/capture/interfaces", None), ("GET", "/api/v1/capture", None),
          ("POST", "/api/v1/capture/start", {"interface": "lo"}), ("POST", "/api/v1/capture/stop", {})]


def _announce_body(appliance: RunningAppliance, path: str, length: int) -> bytes:
    """Only the headers of a request announcing `length` body bytes; the start of the reply (the server
    refuses on the Content-Length and closes, so a client still sending would race it)."""
    context = ssl.create_default_context(cafile=str(appliance.app.ca.ca_cert_path))
    with context.wrap_socket(socket.create_connection(("127.0.0.1", appliance.app.rest_port), timeout=10),
                             server_hostname="localhost") as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                     f"Authorization: Bearer {appliance.app.admin_token}\r\nContent-Length: {length}\r\n\r\n".encode())
        return sock.recv(4096)


def test_interfaces_come_from_netlink_with_state_mac_addresses_and_flags(appliance: RunningAppliance) -> None:
    status, body = appliance.rest.get("/api/v1/capture/interfaces")
    assert status == 200
    by_name = {i["name"]: i for i in body["interfaces"]}
    assert set(by_name) == {name for _, name in socket.if_nameindex()}
    lo = by_name["lo"]
    assert lo["index"] == socket.if_nametoindex("lo") and lo["up"] is True
    assert {"family": "ipv4", "address": "127.0.0.1", "prefixlen": 8} in lo["addresses"]
    assert lo["mac"] == "00:00:00:00:00:00" and lo["speed"] is None and lo["promiscuous"] is False


def test_idle_status_before_any_start(appliance: RunningAppliance) -> None:
    status, body = appliance.rest.get("/api/v1/capture")
    assert status == 200
    assert body["status"] == "idle" and body["interface"] is None and body["packetCount"] == 0
    assert set(body["protocolStats"]) == {"TCP", "UDP", "DNS", "HTTP", "TLS", "ICMP"}
    assert body["autoStart"] is False and body["lastError"] is None


def test_unknown_interface_is_422_naming_it_and_nothing_starts(appliance: RunningAppliance) -> None:
    status, body = appliance.rest.post("/api/v1/capture/start", {"interface": "nosuch0"})
    assert status == 422, body
    assert body["field"] == "interface" and "nosuch0" in body["error"] and "lo" in body["error"]
    assert appliance.rest.get("/api/v1/capture")[1]["status"] == "idle"


def test_hostile_start_bodies_are_refused_with_the_documented_error_and_the_server_keeps_serving(
        appliance: RunningAppliance) -> None:
    cases = [
        ({"interface": "../../etc/passwd"}, 422), ({"interface": "a" * 16}, 422), ({"interface": ""}, 422),
        ({"interface": "lo", "snaplen": 10}, 422), ({"interface": "lo", "snaplen": 1 << 40}, 422),
        ({"interface": "lo", "bufferSize": 0}, 422), ({"interface": "lo", "extra": 1}, 422),
        ({"interface": ["lo"]}, 422), ({}, 422), ([], 422), ({"interface": "lo\u0000"}, 422),
    ]
    for body, expected in cases:
        status, reply = appliance.rest.post("/api/v1/capture/start", body)
        assert status == expected, (body, reply)
        assert "error" in reply
    assert appliance.rest.post("/api/v1/capture/start", raw=b"{\"interface\":")[0] == 400
    assert _announce_body(appliance, "/api/v1/capture/start", 2 << 20).startswith(b"HTTP/1.1 413")
    status, reply = appliance.rest.call("POST", "/api/v1/capture/start", raw=b'{"interface": "lo"}',
                                        headers={"Content-Type": "text/plain"})
    assert status == 415, reply
    assert appliance.rest.get("/api/status")[0] == 200
    assert appliance.rest.get("/api/v1/capture")[1]["status"] == "idle"


def test_every_capture_route_refuses_a_missing_or_wrong_token(appliance: RunningAppliance) -> None:
    for method, path, body in ROUTES:
        for token in (None, "not-the-admin-token", appliance.app.admin_token + "x"):
            status, reply = appliance.rest.call(method, path, body, token=token)
            assert status == 401, (method, path, token, reply)
    assert appliance.rest.get("/api/v1/capture")[1]["status"] == "idle"


def test_the_console_refuses_the_analyst_role_on_every_capture_route_and_lets_the_admin_through(console: Console) -> None:  # noqa: F811
    ana = console.analyst()
    for method, path, body in ROUTES:
        status, reply = ana.request(method, path, body)
        assert status == 403 and reply["code"] == "forbidden", (method, path, reply)
    assert ana.get("/api/v1/alerts")[0] == 200  # the analyst's other reads are untouched
    admin = console.admin()
    assert admin.get("/api/v1/capture")[0] == 200
    assert admin.get("/api/v1/capture/interfaces")[0] == 200
    assert admin.post("/api/v1/capture/start", {"interface": "nosuch0"})[0] == 422


def test_the_openapi_document_describes_the_capture_bodies_and_replies(appliance: RunningAppliance) -> None:
    document = appliance.rest.get("/api/v1/openapi.json")[1]
    start = document["paths"]["/api/v1/capture/start"]["post"]
    assert start["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/StartRequest")
    schemas = document["components"]["schemas"]
    assert {"interface", "promiscuous", "snaplen", "bufferSize"} <= set(schemas["StartRequest"]["properties"])
    assert {"status", "packetCount", "byteCount", "droppedCount", "protocolStats", "uptime", "lastError"} <= set(
        schemas["CaptureStatus"]["properties"])
    assert "name" in schemas["CaptureInterface"]["properties"]
    for _, path, _ in ROUTES:
        assert path in document["paths"]
