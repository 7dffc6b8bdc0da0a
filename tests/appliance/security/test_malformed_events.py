"""Item 5: event messages that do not decode, in the middle of real DNS, process and file event streams.

They used to end the whole stream with INTERNAL (gRPC's deserializer raised), uncounted. Now each
is skipped and counted like a broken packet, and the messages around it are kept.
"""

from __future__ import annotations

import time

import grpc
import pytest

from appliance.generated import sensor_pb2

# A truncated varint, a length past the end, and a string field that is not UTF-8 (field 5 is
# ProcessEvent.name and FileEvent.path; DnsEvent.query is field 4, tag 0x22).
TRUNCATED, PAST_END = b"\x08\xff\xff", b"\x12\x10abc"
NOT_UTF8 = {"StreamDnsEvents": b"\x22\x02\xff\xfe", "StreamProcesses": b"\x2a\x02\xff\xfe",
            "StreamFileEvents": b"\x2a\x02\xff\xfe"}


def _good(kind: str, i: int) -> bytes:
    ts = int(time.time() * 1000)
    if kind == "StreamDnsEvents":
        return sensor_pb2.DnsEvent(query=f"host{i}.example.com", query_type=1, timestamp=ts).SerializeToString()
    if kind == "StreamProcesses":
        return sensor_pb2.ProcessEvent(kind=1, pid=100 + i, name="sh", timestamp=ts).SerializeToString()
    return sensor_pb2.FileEvent(kind=2, pid=100 + i, path=f"/tmp/f{i}", timestamp=ts).SerializeToString()


@pytest.mark.parametrize("method", ["StreamDnsEvents", "StreamProcesses", "StreamFileEvents"])
def test_a_malformed_event_is_skipped_and_counted_and_the_stream_goes_on(appliance, method):
    channel = appliance.channel()
    call = channel.stream_unary(f"/sensor.SensorService/{method}", request_serializer=None,
                                response_deserializer=sensor_pb2.StreamResponse.FromString)
    broken = [TRUNCATED, PAST_END, NOT_UTF8[method]]
    messages = [_good(method, 0), *broken, _good(method, 1), _good(method, 2)]
    reply = call(iter(messages), metadata=[("x-machine-id", "events")], timeout=30)  # no INTERNAL
    assert reply.packets_received == 3 and reply.packets_rejected == len(broken)
    metrics = appliance.rest.get("/api/v1/metrics")[1]
    assert metrics["events_malformed"] == len(broken) and metrics["events_received"] == 3
    agent = appliance.rest.get(f"/api/v1/agents/{reply.agent_id}")[1]
    assert agent["events_malformed"] == len(broken)
    if method != "StreamDnsEvents":
        kind = "processes" if method == "StreamProcesses" else "files"
        status, events = appliance.rest.get(f"/api/v1/agents/{reply.agent_id}/events?kind={kind}")
        assert status == 200 and len(events["events"]) == 3, events
    channel.close()


def test_the_stream_still_works_for_well_formed_events_after_a_broken_one(appliance):
    stub = appliance.stub()
    ts = int(time.time() * 1000)
    reply = stub.StreamProcesses(iter([sensor_pb2.ProcessEvent(kind=1, pid=7, name="ok", timestamp=ts)]),
                                 metadata=[("x-machine-id", "events")], timeout=30)
    assert reply.packets_received == 1 and reply.packets_rejected == 0
    with pytest.raises(grpc.RpcError) as err:  # an unknown method is still refused, as before
        appliance.channel().stream_unary("/sensor.SensorService/Nope")(iter([b""]), timeout=5)
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
