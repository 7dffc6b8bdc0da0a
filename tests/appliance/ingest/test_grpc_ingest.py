"""Ingestion through a real gRPC server over loopback (mTLS), as agents use it."""

import threading
import uuid

import grpc
import pytest

from appliance.generated import sensor_pb2
from appliance.ingest.identity import AGENT_NAMESPACE
from tests.appliance import wire
from tests.polling import wait_for

BASE_MS = 1_700_000_000_000


def meta(machine="machine-A", host="host-a"):
    return [("x-machine-id", machine), ("x-agent-hostname", host), ("x-agent-os", "linux"), ("x-agent-version", "1.2.3")]


def test_stream_packets_one_message_per_packet(appliance):
    stub = appliance.stub()
    reply = stub.StreamPackets(iter([wire.packet(ts_ms=BASE_MS + i) for i in range(5)]), metadata=meta())
    assert reply.packets_received == 5 and reply.packets_rejected == 0
    assert reply.agent_id == str(uuid.uuid5(AGENT_NAMESPACE, "machine:machine-A"))


def test_flows_are_flushed_into_analysis_when_the_stream_ends(appliance):
    stub = appliance.stub()
    batch = sensor_pb2.PacketBatch(packets=[wire.packet(ts_ms=BASE_MS, remote=f"1.1.1.{i}") for i in range(1, 4)])
    stub.StreamPacketBatches(iter([batch]), metadata=meta())
    assert wait_for(lambda: appliance.app.pipeline.flows_processed == 3)
    assert appliance.app.tracker.active_flows == 0
    status, body = appliance.rest.get("/api/v1/flows?state=finished")
    assert status == 200 and {f["end_reason"] for f in body["flows"]} == {"stream_end"}


def test_flows_are_flushed_when_the_stream_breaks(appliance):
    stub = appliance.stub()
    sent = threading.Event()
    release = threading.Event()

    def messages():
        yield sensor_pb2.PacketBatch(packets=[wire.packet(ts_ms=BASE_MS)])
        sent.set()
        release.wait(60)  # held open until the test lets go: its own end would flush the flows

    call = stub.StreamPacketBatches.future(messages(), metadata=meta())
    assert sent.wait(30)
    assert wait_for(lambda: appliance.app.tracker.active_flows == 1)
    call.cancel()  # the agent goes away mid-stream
    release.set()
    assert wait_for(lambda: appliance.app.pipeline.flows_processed == 1)
    assert appliance.app.tracker.active_flows == 0


def test_malformed_packets_are_counted_and_the_stream_goes_on(appliance):
    stub = appliance.stub()
    bad = [
        sensor_pb2.NetworkPacket(),  # all zero
        wire.packet(local="0.0.0.0"),
        wire.packet(direction=0),
        wire.packet(protocol=999),
        wire.packet(rport=100000),
        wire.packet(protocol=1, payload=b"\x08"),  # truncated ICMP: kept best effort
        wire.packet(ts_ms=0),  # repaired
        wire.packet(payload=b"\xff" * 70000),  # truncated to the payload cap
        wire.udp_out("10.0.0.5", "10.0.0.1", 4000, 53, b"\x00\x01garbage"),  # malformed DNS: kept
    ]
    good = [wire.packet(ts_ms=BASE_MS + i, remote="2.2.2.2") for i in range(3)]
    batches = [sensor_pb2.PacketBatch(packets=bad), sensor_pb2.PacketBatch(), sensor_pb2.PacketBatch(packets=good)]
    reply = stub.StreamPacketBatches(iter(batches), metadata=meta())
    assert reply.packets_rejected == 5
    assert reply.packets_received == 4 + 3
    status, metrics = appliance.rest.get("/api/v1/metrics")
    assert metrics["rejected_by_reason"] == {"zero_address": 2, "bad_direction": 1, "bad_protocol": 1, "bad_port": 1}
    assert metrics["repaired_by_reason"]["payload_truncated"] == 1
    # and the server still serves a new stream
    assert stub.StreamPackets(iter([wire.packet()]), metadata=meta()).packets_received == 1


def test_agent_id_falls_back_to_the_peer_address_without_machine_id(appliance):
    reply = appliance.stub().StreamPackets(iter([wire.packet()]))
    assert reply.agent_id == str(uuid.uuid5(AGENT_NAMESPACE, "peer:127.0.0.1"))


def test_two_machines_sharing_one_certificate_keep_distinct_ids(appliance):
    issued = appliance.app.ca.issue_agent("sensor-agent-shared")
    stub = appliance.stub(cert=(issued.cert_pem, issued.key_pem))
    one = stub.StreamPackets(iter([wire.packet()]), metadata=meta("machine-1", "one"))
    two = stub.StreamPackets(iter([wire.packet()]), metadata=meta("machine-2", "two"))
    assert one.agent_id != two.agent_id
    status, body = appliance.rest.get("/api/v1/agents")
    assert {a["hostname"] for a in body["agents"]} == {"one", "two"}


def test_agents_endpoint_shows_identity_counts_and_online_status(appliance):
    stub = appliance.stub()
    release = threading.Event()

    def messages():
        yield sensor_pb2.PacketBatch(packets=[wire.packet(), wire.packet()])
        release.wait(60)  # held open until the test lets go: its own end would flush the flows

    call = stub.StreamPacketBatches.future(messages(), metadata=meta("m-online", "web-01"))
    assert wait_for(lambda: appliance.rest.get("/api/v1/agents")[1]["count"] == 1)
    assert wait_for(lambda: appliance.rest.get("/api/v1/agents")[1]["agents"][0]["packets_received"] == 2)
    agent = appliance.rest.get("/api/v1/agents")[1]["agents"][0]
    assert (agent["hostname"], agent["os"], agent["version"], agent["status"]) == ("web-01", "linux", "1.2.3", "online")
    assert agent["remote_address"] == "127.0.0.1"
    release.set()
    call.result(timeout=10)
    assert wait_for(lambda: appliance.rest.get("/api/v1/agents")[1]["agents"][0]["status"] == "offline")


def test_hostile_metadata_is_bounded_and_cleaned(appliance):
    reply = appliance.stub().StreamPackets(iter([wire.packet()]), metadata=[("x-agent-hostname", "h" * 5000), ("x-machine-id", "m")])
    agent = appliance.rest.get(f"/api/v1/agents/{reply.agent_id}")[1]
    assert agent["hostname"] == "h" * 255


def test_dns_process_and_file_event_streams(appliance):
    stub = appliance.stub()
    seen = []
    appliance.app.pipeline.observe_dns = lambda agent, msg: seen.append((agent, msg))  # observe the hand-off
    appliance.app.ingest._on_dns_event = appliance.app.pipeline.observe_dns
    dns = [sensor_pb2.DnsEvent(timestamp=BASE_MS, query="Example.COM.", query_type=1,
                               answers=[sensor_pb2.DnsAnswer(name="example.com", type=1, ttl=60, data="93.184.216.34")]),
           sensor_pb2.DnsEvent(query="")]
    reply = stub.StreamDnsEvents(iter(dns), metadata=meta())
    assert (reply.packets_received, reply.packets_rejected) == (1, 1)
    assert seen[0][1].qname == "example.com" and seen[0][1].answers[0].data == "93.184.216.34"
    procs = [sensor_pb2.ProcessEvent(kind=1, pid=42, ppid=1, name="curl", path="/usr/bin/curl", command_line="curl x", user="bob"),
             sensor_pb2.ProcessEvent(kind=2, pid=42, exit_code=0), sensor_pb2.ProcessEvent()]
    assert stub.StreamProcesses(iter(procs), metadata=meta()).packets_rejected == 1
    files = [sensor_pb2.FileEvent(kind=2, pid=42, path="/tmp/x", bytes=10), sensor_pb2.FileEvent(kind=7, path="/x")]
    assert stub.StreamFileEvents(iter(files), metadata=meta()).packets_received == 1


def test_a_client_without_certificate_is_refused_at_the_handshake(appliance):
    stub = appliance.stub(with_cert=False)
    with pytest.raises(grpc.RpcError) as err:
        stub.StreamPackets(iter([wire.packet()]), timeout=5)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert appliance.app.ingest.packets_received == 0


def test_an_oversized_message_is_refused_and_the_server_keeps_serving(tmp_path, monkeypatch):
    from tests.conftest import start_appliance
    monkeypatch.delenv("SENSOR_ADMIN_TOKEN", raising=False)
    running = start_appliance(tmp_path, grpc={"max_message_bytes": 64 * 1024})
    try:
        stub = running.stub()
        huge = sensor_pb2.PacketBatch(packets=[wire.packet(payload=b"x" * 60000) for _ in range(4)])
        with pytest.raises(grpc.RpcError) as err:
            stub.StreamPacketBatches(iter([huge]), metadata=meta(), timeout=10)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert stub.StreamPackets(iter([wire.packet()]), metadata=meta(), timeout=10).packets_received == 1
    finally:
        running.app.stop()


def test_bytes_that_are_not_protobuf_are_counted_and_the_stream_goes_on(appliance):
    channel = appliance.channel()
    raw_batches = channel.stream_unary("/sensor.SensorService/StreamPacketBatches",
                                       request_serializer=lambda b: b, response_deserializer=sensor_pb2.StreamResponse.FromString)
    raw_packets = channel.stream_unary("/sensor.SensorService/StreamPackets",
                                       request_serializer=lambda b: b, response_deserializer=sensor_pb2.StreamResponse.FromString)
    good = sensor_pb2.PacketBatch(packets=[wire.packet(), wire.packet(remote="1.1.1.1")]).SerializeToString()
    garbage = b"\xff\xff\xff\xff\x0f" * 20  # a varint longer than ten bytes
    # A batch whose framing breaks after one good packet keeps that packet, drops the rest.
    truncated = good[: len(good) - 3]
    reply = raw_batches(iter([garbage, good, truncated, good]), metadata=meta(), timeout=10)
    assert (reply.packets_received, reply.packets_rejected) == (5, 2)
    reply = raw_packets(iter([garbage, wire.packet().SerializeToString()]), metadata=meta(), timeout=10)
    assert (reply.packets_received, reply.packets_rejected) == (1, 1)
    status, metrics = appliance.rest.get("/api/v1/metrics")
    assert metrics["rejected_by_reason"]["malformed_message"] == 3
    assert appliance.stub().StreamPackets(iter([wire.packet()]), metadata=meta()).packets_received == 1
    assert wait_for(lambda: appliance.app.agents.online == 0)  # every stream was closed, none leaked


def test_drops_reported_by_a_reconnecting_agent_are_shown(appliance):
    stub = appliance.stub()
    stub.StreamPackets(iter([wire.packet()]), metadata=meta() + [("x-agent-dropped", "1500")])
    stub.StreamPackets(iter([wire.packet()]), metadata=meta() + [("x-agent-dropped", "-3")])
    [agent] = appliance.rest.get("/api/v1/agents")[1]["agents"]
    assert agent["dropped_by_agent"] == 1500


def test_process_events_are_listed_per_agent_newest_first(appliance):
    stub = appliance.stub()
    procs = [sensor_pb2.ProcessEvent(kind=1, pid=10 + i, name=f"p{i}", command_line=f"p{i} --x") for i in range(3)]
    reply = stub.StreamProcesses(iter(procs), metadata=meta())
    status, body = appliance.rest.get(f"/api/v1/agents/{reply.agent_id}/events?limit=2")
    assert status == 200 and [e["name"] for e in body["events"]] == ["p2", "p1"]
    assert appliance.rest.get(f"/api/v1/agents/{reply.agent_id}/events?kind=files")[1]["count"] == 0
    assert appliance.rest.get(f"/api/v1/agents/{reply.agent_id}/events?kind=nope")[0] == 422
    assert appliance.rest.get("/api/v1/agents/unknown/events")[0] == 404


def test_live_flows_are_listed_in_update_order_without_walking_the_table(appliance):
    """5,000 live flows on a held stream, then a late packet (stamped before all of them) for the first:
    GET /api/v1/flows lists that flow as the newest live one, and the snapshot behind the reply looked
    at the list tails and the flows it returned, not at the 5,000."""
    stub = appliance.stub()
    sent, release = threading.Event(), threading.Event()
    remotes = [f"10.9.{i >> 8}.{i & 255}" for i in range(5000)]

    def messages():
        for start in range(0, len(remotes), 500):
            yield sensor_pb2.PacketBatch(packets=[wire.packet(ts_ms=BASE_MS + 1000 + i, remote=remotes[i])
                                                  for i in range(start, start + 500)])
        yield sensor_pb2.PacketBatch(packets=[wire.packet(ts_ms=BASE_MS, remote=remotes[0], direction=wire.INBOUND)])
        sent.set()
        release.wait(60)  # held open until the test lets go: its own end would flush the flows

    call = stub.StreamPacketBatches.future(messages(), metadata=meta())
    try:
        assert sent.wait(30)
        assert wait_for(lambda: appliance.app.ingest.packets_received == len(remotes) + 1)
        status, body = appliance.rest.get("/api/v1/flows?state=active&limit=1")
        assert status == 200 and body["count"] == 1
        [newest] = body["flows"]
        assert newest["remote_ip"] == remotes[0] and newest["packets_in"] == 1
        assert appliance.app.tracker.snapshot_visited() <= 5 + 1  # one list per timeout class, then the one flow
        status, body = appliance.rest.get("/api/v1/flows?state=active&limit=1000")
        assert status == 200 and body["count"] == 1000
        assert appliance.app.tracker.snapshot_visited() <= 5 + 1000
    finally:
        release.set()
        call.cancel()
