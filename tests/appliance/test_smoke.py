from tests.appliance import wire


def test_status_is_public_and_running(appliance):
    status, body = appliance.rest.get("/api/status", token=None)
    assert status == 200
    assert body["status"] == "Running"


def test_batch_stream_reaches_flow_table(appliance):
    from appliance.generated import sensor_pb2
    stub = appliance.stub()
    batch = sensor_pb2.PacketBatch(packets=[wire.packet(), wire.packet(direction=wire.INBOUND)])
    reply = stub.StreamPacketBatches(iter([batch]), metadata=[("x-machine-id", "m-1")])
    assert reply.packets_received == 2
    assert appliance.app.pipeline.drain()
    status, body = appliance.rest.get("/api/v1/flows")
    assert status == 200
    assert body["count"] == 1
    assert body["flows"][0]["packets_in"] == 1 and body["flows"][0]["packets_out"] == 1
