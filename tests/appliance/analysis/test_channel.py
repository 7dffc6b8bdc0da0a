"""The local channel to the analysis process: frames, their bound, and a peer that goes away."""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from appliance.analysis.channel import CONTROL, FLOWS, MAX_FRAME, Channel, ChannelClosed


Pair = Callable[[], tuple[Channel, Channel]]


@pytest.fixture
def pair() -> Iterator[Pair]:
    """Connected channels (the server's end first), every one closed when the test ends."""
    opened: list[Channel] = []

    def make() -> tuple[Channel, Channel]:
        ours, theirs = Channel.pair()
        made = (ours, Channel(theirs))
        opened.extend(made)
        return made

    yield make
    for channel in opened:
        channel.close()


def test_frames_arrive_whole_and_in_order(pair: Pair) -> None:
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
    with ours, theirs:
        theirs.sendall(struct.pack("!cI", FLOWS, MAX_FRAME + 1))
        with pytest.raises(ChannelClosed, match="over the"):
            Channel(ours).recv()


@pytest.mark.parametrize("partial", [b"", b"F\x00", b"F\x00\x00\x00\x10abc"])
def test_a_peer_that_goes_away_mid_frame_is_the_end_of_the_channel(partial: bytes, pair: Pair) -> None:
    a, b = pair()
    a.sock.sendall(partial)
    a.close()
    with pytest.raises(ChannelClosed):
        b.recv()
    with pytest.raises(ChannelClosed):
        b.send(FLOWS, b"x")


@pytest.mark.parametrize("size", [1, 300_000, (8 << 20) + 1])  # read in one call, and past the one-call bound
@pytest.mark.parametrize("timeout", [None, 10.0])
def test_a_frame_written_in_pieces_arrives_whole(size: int, timeout: float | None, pair: Pair) -> None:
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
    from appliance.analysis.channel import SEND_BUFFER

    ceiling = int(Path("/proc/sys/net/core/wmem_max").read_text())
    ours, theirs = Channel.pair()
    with theirs:
        assert ours.send_buffer() == 2 * min(SEND_BUFFER, ceiling)
        assert Channel(theirs).send_buffer() < ours.send_buffer()  # only the server's end is raised
        ours.close()
        assert ours.send_buffer() == 0


def test_frames_sent_from_two_threads_at_once_arrive_whole(pair: Pair) -> None:
    """The server's sender and a stop() on another thread may write at the same time: a frame larger than the
    socket's buffers takes several writes, and none of another frame's bytes may come between them."""
    import threading
    import time

    a, b = pair()
    b.sock.settimeout(10)  # interleaved bytes would read as a wrong length: fail, not hang
    # Larger than what the kernel lets one end hold (where net.core.wmem_max is raised too), so every frame takes
    # several writes and the other thread has its chance between them.
    size = max(3 << 20, a.send_buffer() + (1 << 20))

    def send_many(fill: int) -> None:
        for _ in range(6):
            a.send(FLOWS, bytes([fill]) * size)

    senders = [threading.Thread(target=send_many, args=(fill,)) for fill in (1, 2)]
    for sender in senders:
        sender.start()
    time.sleep(0.2)  # both wait on a full buffer before anything is read
    frames = [b.recv() for _ in range(12)]
    for sender in senders:
        sender.join()
    assert sorted(payload[0] for _, payload in frames) == [1] * 6 + [2] * 6
    assert all(kind == FLOWS and payload == bytes([payload[0]]) * size for kind, payload in frames)


def _voluntary_switches(tid: int) -> int:
    with open(f"/proc/self/task/{tid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("voluntary_ctxt_switches"))


def test_a_thread_waiting_for_frames_is_not_woken_by_the_peer_reading_what_this_end_sent(pair: Pair) -> None:
    """The server's receiving thread waits on the end its sender writes to: each frame the analysis process reads
    frees send space there, and a thread asleep in recv() was woken for it (a wake-up on the ingestion CPU per
    frame). Waiting in poll() for data, it sleeps through them."""
    import threading

    server, analysis = pair()
    received: list[tuple[bytes, bytes]] = []
    waiting = threading.Thread(target=lambda: received.append(server.recv()))
    waiting.start()
    tid = waiting.native_id
    assert tid is not None
    wchan = Path(f"/proc/self/task/{tid}/wchan")
    for _ in range(200):  # let it fall asleep first: its count moves only when it wakes
        if wchan.read_text() not in ("", "0"):
            break
        threading.Event().wait(0.005)
    before = _voluntary_switches(tid)
    for _ in range(200):
        server.send(FLOWS, b"x" * 4096)
        assert analysis.recv() == (FLOWS, b"x" * 4096)
    woken = _voluntary_switches(tid) - before
    analysis.send(CONTROL, b"stop")
    waiting.join(5)
    assert received == [(CONTROL, b"stop")]
    assert woken < 20, f"the waiting thread woke {woken} times for 200 frames read by the peer"
