"""Agent identity over mutual TLS: enrolled certificates stream; others are refused; binding; revocation."""

from __future__ import annotations

import grpc
import pytest
from cryptography.hazmat.primitives import serialization

from appliance.generated import sensor_pb2, sensor_pb2_grpc
from appliance.ingest.identity import agent_id_for
from appliance.pki import CertificateAuthority, fingerprint
from tests.appliance import wire
from tests.appliance.enrollment.conftest import embedded, embedded_cert, fetch_script, new_token
from tests.conftest import start_appliance


def enroll(appliance, os_kind: str = "linux") -> tuple[bytes, bytes]:
    token = new_token(appliance)["token"]
    status, body = fetch_script(appliance, os_kind, token)
    assert status == 200
    script = body.decode()
    var = ("CertB64", "KeyB64") if os_kind == "windows" else ("CERT_B64", "KEY_B64")
    return embedded(script, var[0]), embedded(script, var[1])


def stream(appliance, cert: tuple[bytes, bytes] | None, machine_id: str | None, *, with_cert: bool = True) -> int:
    stub = sensor_pb2_grpc.SensorServiceStub(appliance.channel(cert=cert, with_cert=with_cert))
    metadata = [("x-machine-id", machine_id)] if machine_id else []
    reply = stub.StreamPacketBatches(iter([sensor_pb2.PacketBatch(packets=[wire.packet()])]), metadata=metadata,
                                     timeout=10)
    return reply.packets_received


def refused(appliance, cert, machine_id, **kw) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        stream(appliance, cert, machine_id, **kw)
    return info.value


def test_an_enrolled_agent_streams_over_mtls(enrolling):
    cert = enroll(enrolling, "windows")
    assert stream(enrolling, cert, "machine-a") == 1
    assert stream(enrolling, cert, "machine-a") == 1  # and again, same machine


def test_a_client_without_certificate_is_refused_at_the_handshake(enrolling):
    error = refused(enrolling, None, "machine-a", with_cert=False)
    assert error.code() == grpc.StatusCode.UNAVAILABLE


def test_a_certificate_from_another_ca_is_refused_at_the_handshake(enrolling, tmp_path):
    other = CertificateAuthority.ensure(tmp_path / "other-ca", ["localhost"])
    issued = other.issue_agent("sensor-agent-evil00")
    error = refused(enrolling, (issued.cert_pem, issued.key_pem), "machine-a")
    assert error.code() == grpc.StatusCode.UNAVAILABLE


def test_a_certificate_is_bound_to_the_first_machine_id(enrolling):
    cert = enroll(enrolling)
    assert stream(enrolling, cert, "machine-a") == 1
    error = refused(enrolling, cert, "machine-b")
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "bound to another machine" in error.details()
    assert stream(enrolling, cert, "machine-a") == 1
    [record] = enrolling.rest.get("/api/v1/agent/certificates")[1]["certificates"]
    assert record["machine_id"] == "machine-a"
    assert record["agent_id"] == agent_id_for("machine-a", "")


def test_an_enrolled_certificate_must_send_its_machine_id(enrolling):
    cert = enroll(enrolling)
    error = refused(enrolling, cert, None)
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED


def test_a_revoked_certificate_is_refused_at_the_next_connection(enrolling):
    cert = enroll(enrolling)
    assert stream(enrolling, cert, "machine-r") == 1
    agent_id = agent_id_for("machine-r", "")
    status, body = enrolling.rest.post(f"/api/v1/agents/{agent_id}/revoke")
    assert status == 200 and body == {"id": agent_id, "revoked": 1, "already_revoked": 0}
    error = refused(enrolling, cert, "machine-r")
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED and "revoked" in error.details()
    status, body = enrolling.rest.post(f"/api/v1/agents/{agent_id}/revoke")
    assert status == 200 and body["already_revoked"] == 1


def test_a_certificate_can_be_revoked_before_it_ever_connects(enrolling):
    cert = enroll(enrolling)
    from cryptography import x509

    fp = fingerprint(x509.load_pem_x509_certificate(cert[0]))
    assert enrolling.rest.post(f"/api/v1/agents/{fp}/revoke")[0] == 200
    assert refused(enrolling, cert, "machine-x").code() == grpc.StatusCode.PERMISSION_DENIED


def test_revocation_needs_admin_and_a_known_id(enrolling):
    assert enrolling.rest.post("/api/v1/agents/whatever/revoke", token=None)[0] == 401
    status, body = enrolling.rest.post("/api/v1/agents/00000000-0000-0000-0000-000000000000/revoke")
    assert status == 404 and "error" in body


def test_re_enrollment_replaces_the_certificate_and_keeps_one_agent(enrolling):
    old = enroll(enrolling)
    assert stream(enrolling, old, "machine-e") == 1
    new = enroll(enrolling)
    assert stream(enrolling, new, "machine-e") == 1
    error = refused(enrolling, old, "machine-e")  # the old certificate was superseded
    assert "superseded" in error.details()
    agents = enrolling.rest.get("/api/v1/agents")[1]["agents"]
    assert [a["id"] for a in agents] == [agent_id_for("machine-e", "")]


def test_binding_and_revocation_survive_a_restart(tmp_path, monkeypatch):
    monkeypatch.delenv("SENSOR_ADMIN_TOKEN", raising=False)
    from tests.appliance.enrollment.conftest import put_payload

    first = start_appliance(tmp_path)
    try:
        put_payload(first)
        bound, revoked = enroll(first), enroll(first)
        assert stream(first, bound, "m-1") == 1
        assert stream(first, revoked, "m-2") == 1
        assert first.rest.post(f"/api/v1/agents/{agent_id_for('m-2', '')}/revoke")[0] == 200
    finally:
        first.app.stop()
    second = start_appliance(tmp_path)
    try:
        assert refused(second, bound, "m-9").code() == grpc.StatusCode.PERMISSION_DENIED
        assert stream(second, bound, "m-1") == 1
        assert refused(second, revoked, "m-2").code() == grpc.StatusCode.PERMISSION_DENIED
    finally:
        second.app.stop()


def test_the_private_key_in_the_script_matches_and_is_unencrypted(enrolling):
    token = new_token(enrolling)["token"]
    script = fetch_script(enrolling, "macos", token)[1].decode()
    key = serialization.load_pem_private_key(embedded(script, "KEY_B64"), password=None)
    assert key.public_key().public_numbers() == embedded_cert(script, "CERT_B64").public_key().public_numbers()
