"""The local channel to the analysis process: frames, their bound, and a peer that goes away."""

from __future__ import annotations

import socket
import struct

import pytest

from appliance.analysis.channel import CONTROL, FLOWS, MAX_FRAME, Channel, ChannelClosed


def pair() -> tuple[Channel, Channel]:
    ours, theirs = Channel.pair()
    return ours, Channel(theirs)


def test_frames_arrive_whole_and_in_order() -> None:
    a, b = pair()
    big = bytes(range(256)) * 8192  # 2 MiB: more than one socket buffer
    a.send(FLOWS, b"")
    a.send_json(CONTROL, {"op": "drain", "seq": 3})
    import threading
    sender = threading.Thread(target=a.send, args=(FLOWS, big))
    sender.start()
    assert b.recv() == (FLOWS, b"")
    assert b.recv() == (CONTROL, b'{"op":"drain","seq":3}')
    assert b.recv() == (FLOWS, big)
    sender.join()


def test_a_frame_over_the_bound_ends_the_channel_instead_of_allocating_it() -> None:
    ours, theirs = socket.socketpair()
    theirs.sendall(struct.pack("!cI", FLOWS, MAX_FRAME + 1))
    with pytest.raises(ChannelClosed, match="over the"):
        Channel(ours).recv()


@pytest.mark.parametrize("partial", [b"", b"F\x00", b"F\x00\x00\x00\x10abc"])
def test_a_peer_that_goes_away_mid_frame_is_the_end_of_the_channel(partial: bytes) -> None:
    a, b = pair()
    a.sock.sendall(partial)
    a.close()
    with pytest.raises(ChannelClosed):
        b.recv()
    with pytest.raises(ChannelClosed):
        b.send(FLOWS, b"x")


@pytest.mark.parametrize("size", [1, 300_000, (8 << 20) + 1])  # read in one call, and past the one-call bound
@pytest.mark.parametrize("timeout", [None, 10.0])
def test_a_frame_written_in_pieces_arrives_whole(size: int, timeout: float | None) -> None:
    """The reader takes a frame in one call where it may (no timeout, up to 8 MiB), in chunks otherwise;
    either way a frame the peer writes in pieces, with pauses, arrives whole."""
    import threading
    import time

    a, b = pair()
    b.sock.settimeout(timeout)
    payload = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    frame = struct.pack("!cI", FLOWS, size) + payload

    def write() -> None:
        for start in range(0, len(frame), max(len(frame) // 3, 1)):
            a.sock.sendall(frame[start : start + max(len(frame) // 3, 1)])
            time.sleep(0.05)

    writer = threading.Thread(target=write)
    writer.start()
    assert b.recv() == (FLOWS, payload)
    writer.join()
    a.close()
    with pytest.raises(ChannelClosed):
        b.recv()


def test_the_server_end_asks_for_a_send_buffer_that_holds_a_whole_batch() -> None:
    """A frame that fits goes in one copy (see SEND_BUFFER); the kernel grants at most net.core.wmem_max, and
    reports twice what it granted."""
    from pathlib import Path

    from appliance.analysis.channel import SEND_BUFFER

    ceiling = int(Path("/proc/sys/net/core/wmem_max").read_text())
    ours, theirs = Channel.pair()
    assert ours.send_buffer() == 2 * min(SEND_BUFFER, ceiling)
    assert Channel(theirs).send_buffer() < ours.send_buffer()  # only the server's end is raised
    ours.close()
    assert ours.send_buffer() == 0


def wire_flows_and_records() -> tuple[list, list]:
    """Ended flows of a corpus as the server's table hands them over (WireFlows, and FlowRecords Python held)."""
    from appliance.flows.tracker import FlowTracker
    from appliance.ingest.convert import PacketConverter
    from tests.appliance.detection import scenarios as sc

    ended: list = []
    tracker = FlowTracker(ended.extend, ended_as_wire=True)
    converter = PacketConverter()
    for stream in (sc.benign_office(2, minutes=5), sc.icmp_tunnel()):
        tracker.stream_opened(stream.machine_id)
        tracker.add_packets(stream.machine_id, converter.read(stream.sorted()))
        tracker.stream_closed(stream.machine_id)
    from appliance.native.fastpath import WireFlow

    wire = [f for f in ended if type(f) is WireFlow]
    held = [f for f in ended if type(f) is not WireFlow]
    assert len(wire) > 50 and held  # the ICMP tunnel's flows are held by Python
    return wire, ended


def test_a_frame_of_parts_is_the_encoded_batch_framed() -> None:
    """send_parts writes what send(FLOWS, record_codec.encode(flows)) writes: WireFlows' entries as they are, runs of
    FlowRecords encoded (record_parts); the frame decodes to the flows in their order."""
    from appliance.flows import record_codec

    wire, mixed = wire_flows_and_records()
    a, b = pair()
    a.send_parts(FLOWS, record_codec.VERSION_FIELD, wire)
    assert b.recv() == (FLOWS, record_codec.encode(wire))
    with pytest.raises(TypeError, match="WireFlow or bytes"):  # a FlowRecord among them: nothing written
        a.send_parts(FLOWS, record_codec.VERSION_FIELD, mixed)
    a.send_parts(FLOWS, record_codec.VERSION_FIELD, record_codec.record_parts(mixed))
    kind, payload = b.recv()
    assert kind == FLOWS and payload == record_codec.encode(mixed)
    assert [f.flow_id for f in record_codec.decode(payload)] == [f.flow_id for f in mixed]
    a.send_parts(CONTROL, b"", [])  # an empty payload is a frame too
    assert b.recv() == (CONTROL, b"")


@pytest.mark.parametrize("bad", [None, "text", bytearray(b"x"), 7])
def test_a_part_that_is_not_bytes_or_a_wireflow_writes_nothing(bad: object) -> None:
    a, b = pair()
    with pytest.raises(TypeError):
        a.send_parts(FLOWS, b"v", [b"one", bad])
    with pytest.raises(TypeError):
        a.send_parts(b"FF", b"v", [])  # the kind is one byte
    b.sock.setblocking(False)
    with pytest.raises(BlockingIOError):  # nothing reached the peer
        b.sock.recv(1)


def test_a_frame_of_parts_is_written_without_the_interpreter_lock() -> None:
    """A frame larger than the socket's buffers, with nobody reading yet: the writing thread waits in the kernel
    with the lock released, so Python runs meanwhile; once read, the frame arrives whole."""
    import threading
    import time

    a, b = pair()
    parts = [bytes([i % 256]) * 65_536 for i in range(128)]  # 8 MiB
    writer = threading.Thread(target=a.send_parts, args=(FLOWS, b"head", parts))
    writer.start()
    ticks = 0
    deadline = time.monotonic() + 0.3
    while time.monotonic() < deadline:
        ticks += 1
    assert writer.is_alive() and ticks > 10_000  # the write is blocked, the interpreter is not
    parts.clear()  # the caller's list may change: the frame is what was handed over
    assert b.recv() == (FLOWS, b"head" + b"".join(bytes([i % 256]) * 65_536 for i in range(128)))
    writer.join(5)
    assert not writer.is_alive()


def test_parts_to_a_peer_that_went_away_or_a_closed_channel_end_the_channel() -> None:
    a, b = pair()
    b.close()
    with pytest.raises(ChannelClosed):
        a.send_parts(FLOWS, b"v", [b"x" * 100_000])
    a.close()
    with pytest.raises(ChannelClosed):  # a closed socket's descriptor is -1: never written to
        a.send_parts(FLOWS, b"v", [b"x"])
