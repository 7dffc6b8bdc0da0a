"""The C outbox of the hand-off to the analysis process (appliance/native/outbox.h), over real socketpairs.

It must keep FairQueue's rules exactly (the differential test: the same flows in the same frames, the same
drops per agent), write whole frames the analysis process reads (DNS ahead of flows), gather until a batch is
full or a flush, come back to Python when asked, and count what a broken channel did not take.
"""

from __future__ import annotations

import errno
import random
import socket
import struct
import threading
import time
from collections import Counter

import pytest

from appliance.analysis.fair_queue import FairQueue
from appliance.flows import record_codec
from appliance.native.fastpath import Outbox

HEAD = struct.Struct("!cI")


def entry(agent: str, n: int) -> bytes:
    """A records entry (field 1, length-delimited) naming its flow."""
    body = f"{agent}:{n}".encode()
    return bytes([0x0A, len(body)]) + body


def read_frame(sock: socket.socket) -> tuple[bytes, bytes]:
    head = sock.recv(HEAD.size, socket.MSG_WAITALL)
    assert len(head) == HEAD.size
    kind, size = HEAD.unpack(head)
    payload = sock.recv(size, socket.MSG_WAITALL) if size else b""
    assert len(payload) == size
    return kind, payload


def flows_in(payload: bytes) -> list[str]:
    """The flow names of an F frame's payload: the version field, then entries."""
    assert payload[:2] == b"\x08\x01"
    names, at = [], 2
    while at < len(payload):
        assert payload[at] == 0x0A
        size = payload[at + 1]
        names.append(payload[at + 2 : at + 2 + size].decode())
        at += 2 + size
    return names


class Sender:
    """outbox.run on a thread, its frames read on another, as AnalysisProcess and the analysis process do."""

    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox
        self.ours, self.theirs = socket.socketpair()
        self.frames: list[tuple[bytes, bytes]] = []
        self.result: tuple[int, int] | None = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            while True:
                self.frames.append(read_frame(self.theirs))
        except (AssertionError, OSError):
            pass

    def run_args(self) -> tuple[object, ...]:
        return (self.ours,)

    def run(self) -> threading.Thread:
        def go() -> None:
            self.result = self.outbox.run(*self.run_args())

        thread = threading.Thread(target=go, daemon=True)
        thread.start()
        return thread

    def until(self, count: int, timeout: float = 10.0) -> list[tuple[bytes, bytes]]:
        deadline = time.monotonic() + timeout
        while len(self.frames) < count and time.monotonic() < deadline:
            time.sleep(0.005)
        assert len(self.frames) >= count, self.frames
        return self.frames

    def close(self) -> None:
        self.outbox.close()
        self.ours.close()
        self.theirs.close()


def drained_frames(outbox: Outbox, sender: Sender) -> list[list[str]]:
    """Everything waiting, as the frames run() cuts it: run until the outbox is empty."""
    before = len(sender.frames)
    outbox.poke(flush=True, want_idle=True)
    thread = sender.run()
    thread.join(10)
    assert not thread.is_alive() and sender.result == (0, 0)
    time.sleep(0.05)
    assert outbox.idle
    return [flows_in(p) for kind, p in sender.frames[before:] if kind == b"F"]


@pytest.mark.parametrize("seed", range(12))
def test_the_outbox_cuts_and_drops_exactly_as_the_fair_queue(seed: int) -> None:
    rng = random.Random(seed)
    size, batch = rng.choice([(40, 16), (100, 32), (1000, 256), (7, 3)])
    outbox = Outbox(size, batch, 100, 30.0)
    queue = FairQueue(size)
    sender = Sender(outbox)
    counter = 0
    dropped: Counter[str] = Counter()
    try:
        for _ in range(6):
            for _ in range(rng.randint(1, 12)):
                run = []
                for _ in range(rng.randint(1, 40)):
                    agent = f"a{min(int(rng.expovariate(0.5)), 7)}"  # a few agents, some far busier
                    run.append((agent, counter))
                    counter += 1
                first = run[0][0]
                run.sort(key=lambda f: f[0] != first)  # mostly one agent per call, as the flow table hands them
                got = outbox.put([(agent, entry(agent, n)) for agent, n in run])
                dropped.update(got or {})
                queue.put_many([_Flow(agent, n) for agent, n in run])
            expected = []
            while True:
                taken = queue.take_round(batch, timeout=0)
                if not taken:
                    break
                queue.done(len(taken))
                expected.append([f"{f.agent_id}:{f.n}" for f in taken])
            assert drained_frames(outbox, sender) == expected
            assert dropped == queue.dropped_by_agent and outbox.dropped == queue.dropped
    finally:
        sender.close()


class _Flow:
    __slots__ = ("agent_id", "n")

    def __init__(self, agent_id: str, n: int) -> None:
        self.agent_id, self.n = agent_id, n


def test_dns_items_go_in_one_frame_ahead_of_the_flows_and_read_back_as_the_codec_wrote_them() -> None:
    outbox = Outbox(100, 8, 100, 30.0)
    sender = Sender(outbox)
    try:
        answer = b"\x08\x07\x10\x01"  # a serialized DnsMessage (id 7, a response)
        items = [("agent-1", answer, False), ("agent-2", b"", True), ("", answer, False)]
        outbox.put([("agent-1", entry("agent-1", 0))])
        assert outbox.put_dns(items[:2]) == 0 and outbox.put_dns([("", answer)]) == 0  # an answer: not from an event
        assert outbox.dns_depth == 3
        drained_frames(outbox, sender)
        kinds = [k for k, _ in sender.frames]
        assert kinds == [b"D", b"F"]
        assert sender.frames[0][1] == record_codec.encode_dns(items)  # byte for byte what the Python sender sent
        assert [(a, m, e) for a, m, e in record_codec.decode_dns(sender.frames[0][1])][1][0] == "agent-2"
    finally:
        sender.close()


def test_dns_items_past_the_bound_are_dropped_newest_first_counted_and_the_rest_go_in_order() -> None:
    outbox = Outbox(10, 100, 5, 30.0)
    sender = Sender(outbox)
    try:
        first = [(f"a{i}", bytes([i]), False) for i in range(3)]
        second = [(f"b{i}", bytes([i]), i % 2 == 1) for i in range(4)]
        assert outbox.put_dns(first) == 0 and outbox.put_dns(second) == 2  # b2 and b3 do not fit
        assert outbox.dns_depth == 5 and outbox.dns_dropped == 2
        assert outbox.put_dns([("c", b"", False)] * 3) == 3  # full: nothing of this call is kept
        assert outbox.put_dns([]) == 0
        assert outbox.dns_depth == 5 and outbox.dns_dropped == 5
        drained_frames(outbox, sender)
        assert [k for k, _ in sender.frames] == [b"D"]
        assert sender.frames[0][1] == record_codec.encode_dns([*first, *second[:2]])
    finally:
        sender.close()


def test_it_gathers_until_a_batch_is_full_and_a_flush_sends_at_once() -> None:
    outbox = Outbox(1000, 10, 100, 30.0)
    sender = Sender(outbox)
    thread = sender.run()
    try:
        outbox.put([("a", entry("a", n)) for n in range(4)])
        time.sleep(0.3)
        assert sender.frames == []  # gathering (30 s)
        outbox.put([("a", entry("a", n)) for n in range(4, 12)])  # a batch's worth: sent at once
        frames = sender.until(1)
        assert flows_in(frames[0][1]) == [f"a:{n}" for n in range(10)]
        time.sleep(0.2)
        assert len(sender.frames) == 1 and outbox.depth == 2
        outbox.poke(flush=True)
        assert flows_in(sender.until(2)[1][1]) == ["a:10", "a:11"]
        assert outbox.frames_sent == 2
        outbox.poke()  # back to Python
        thread.join(5)
        assert not thread.is_alive() and sender.result == (0, 0)
    finally:
        sender.close()


def test_entries_are_held_by_reference_until_written_then_released() -> None:
    """A flow's node holds its entry (no copy) while it waits and is written; the sender cannot drop that reference
    without the interpreter lock, so the next call that holds it does (here: run coming back, and a put)."""
    import sys

    outbox = Outbox(1000, 100, 100, 30.0)
    sender = Sender(outbox)
    entries = [entry("a", n) for n in range(5)]
    before = [sys.getrefcount(e) for e in entries]
    try:
        outbox.put([("a", e) for e in entries])
        assert [sys.getrefcount(e) for e in entries] == [b + 1 for b in before]
        assert drained_frames(outbox, sender) == [[f"a:{n}" for n in range(5)]]
        assert [sys.getrefcount(e) for e in entries] == before  # released when run() came back
        dropped = Outbox(2, 100, 100, 30.0)
        kept = [entry("b", n) for n in range(4)]
        counts = [sys.getrefcount(e) for e in kept]
        assert dropped.put([("b", e) for e in kept]) == {"b": 2}  # two over the bound: dropped and released at once
        assert [sys.getrefcount(e) for e in kept] == [counts[0] + 1, counts[1] + 1, counts[2], counts[3]]
        del dropped  # the outbox's end releases what waits
        assert [sys.getrefcount(e) for e in kept] == counts
    finally:
        sender.close()


def test_a_short_gather_sends_what_waits_without_a_flush() -> None:
    outbox = Outbox(1000, 100, 100, 0.02)
    sender = Sender(outbox)
    sender.run()
    try:
        outbox.put([("a", entry("a", 1))])
        assert flows_in(sender.until(1)[0][1]) == ["a:1"]
    finally:
        sender.close()


def test_close_brings_run_back_and_a_second_runner_is_refused() -> None:
    outbox = Outbox(10, 4, 10, 30.0)
    sender = Sender(outbox)
    thread = sender.run()
    try:
        time.sleep(0.1)
        with pytest.raises(RuntimeError, match="another thread"):
            outbox.run(sender.ours)
        outbox.close()
        thread.join(5)
        assert not thread.is_alive() and sender.result == (0, 0)
    finally:
        sender.close()


def test_a_broken_channel_returns_the_flows_of_the_frame_that_did_not_go() -> None:
    outbox = Outbox(1000, 50, 10, 30.0)
    ours, theirs = socket.socketpair()
    theirs.close()
    try:
        outbox.put([("a", entry("a", n)) for n in range(30)] + [("b", entry("b", n)) for n in range(30)])
        outbox.poke(flush=True)
        lost, err = outbox.run(ours)
        assert (lost, err) == (50, errno.EPIPE)
        assert outbox.take_sent() == 0 and outbox.depth == 10 and outbox.frames_sent == 0
    finally:
        ours.close()


def test_a_frame_larger_than_the_socket_buffer_arrives_whole() -> None:
    outbox = Outbox(10_000, 2000, 10, 30.0)
    sender = Sender(outbox)
    try:
        sender.ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        big = bytes([0x0A, 0x80, 0x08]) + b"x" * 1024  # one entry of 1 KiB (a two-byte length)
        outbox.put([("a", big)] * 1500)
        outbox.poke(flush=True, want_idle=True)
        sender.run().join(10)
        assert sender.result == (0, 0)
        (kind, payload), = sender.until(1)
        assert kind == b"F" and payload == b"\x08\x01" + big * 1500
        assert outbox.take_sent() == 1500
    finally:
        sender.close()


@pytest.mark.parametrize("bad", [[("a", "not bytes")], [("a",)], [object()], [(1, b"x")], "not a list"])
def test_hostile_input_is_refused_and_nothing_is_queued(bad: object) -> None:
    outbox = Outbox(10, 4, 10, 30.0)
    outbox.put([("a", entry("a", 0))])
    with pytest.raises(TypeError):
        outbox.put([("a", entry("a", 1)), *bad] if isinstance(bad, list) else bad)
    assert outbox.depth == 1
    for bad_dns in ([("a", "str", False)], [("a", "str")], [("a",)], [(1, b"")], [None]):
        with pytest.raises(TypeError):
            outbox.put_dns([("a", b""), *bad_dns])
    assert outbox.dns_depth == 0
    with pytest.raises(ValueError):
        Outbox(0, 4, 10, 1.0)
    bare = Outbox.__new__(Outbox)  # never initialised: refused, not a crash
    for call in (lambda: bare.put([]), lambda: bare.put_dns([]), lambda: bare.run(0), lambda: bare.wait_idle(0.1)):
        with pytest.raises(RuntimeError, match="not initialised"):
            call()


def test_producers_on_many_threads_every_flow_arrives_once_in_whole_frames() -> None:
    outbox = Outbox(1_000_000, 64, 10_000, 0.001)
    sender = Sender(outbox)
    thread = sender.run()
    try:
        def produce(agent: str) -> None:
            for i in range(0, 2000, 20):
                outbox.put([(agent, entry(agent, n)) for n in range(i, i + 20)])
                outbox.put_dns([(agent, b"", False)])

        producers = [threading.Thread(target=produce, args=(f"p{k}",)) for k in range(4)]
        for p in producers:
            p.start()
        for p in producers:
            p.join()
        outbox.poke(flush=True)
        assert outbox.wait_idle(20.0)
        outbox.close()
        thread.join(5)
        time.sleep(0.1)
        names = [n for kind, p in sender.frames if kind == b"F" for n in flows_in(p)]
        assert sorted(names) == sorted(f"p{k}:{n}" for k in range(4) for n in range(2000))
        for k in range(4):  # each agent's flows in the order they were put
            mine = [int(n.split(":")[1]) for n in names if n.startswith(f"p{k}:")]
            assert mine == sorted(mine)
        assert sum(len(record_codec.decode_dns(p)) for kind, p in sender.frames if kind == b"D") == 400
        assert outbox.take_sent() == 8000
    finally:
        sender.close()


def test_oldest_wait_is_how_long_the_oldest_flow_waiting_has_waited() -> None:
    """The age of the earliest head of the waiting agents' lines (the metrics' analysis_queue_oldest_s): 0.0 when
    nothing waits, growing while the sender is behind, and the next flow's age once the oldest has gone."""
    outbox = Outbox(1000, 4, 100, 30.0)
    sender = Sender(outbox)
    try:
        assert outbox.oldest_wait == 0.0
        outbox.put([("a", entry("a", n)) for n in range(2)])
        time.sleep(0.2)
        outbox.put([("b", entry("b", 0))])
        first = outbox.oldest_wait
        assert 0.2 <= first < 10  # a's, not b's
        time.sleep(0.05)
        assert outbox.oldest_wait >= first + 0.05
        thread = sender.run()
        outbox.put([("b", entry("b", 1))])  # four wait: a batch, sent at once, a's two and b's two in turn
        assert sorted(flows_in(sender.until(1)[0][1])) == ["a:0", "a:1", "b:0", "b:1"]
        assert outbox.depth == 0 and outbox.oldest_wait == 0.0
        outbox.put([("c", entry("c", 0))])
        assert 0.0 <= outbox.oldest_wait < 0.2  # the age of the flow that waits now, not of those sent
        outbox.poke()
        thread.join(5)
    finally:
        sender.close()


class ReadySender(Sender):
    """READY mode: run(fd, ready_fd), with the analysis process's side of the ready socketpair to say it waits."""

    def __init__(self, outbox: Outbox) -> None:
        super().__init__(outbox)
        self.ready_ours, self.ready_theirs = socket.socketpair()
        self.ready_ours.setblocking(False)

    def run_args(self) -> tuple[object, ...]:
        return (self.ours, self.ready_ours.fileno())

    def waits(self) -> None:
        """The analysis process's byte before it waits for the next frame."""
        self.ready_theirs.send(b"r")

    def close(self) -> None:
        super().close()
        self.ready_ours.close()
        self.ready_theirs.close()


def test_ready_mode_holds_flows_while_analysis_works_and_sends_them_all_when_it_waits() -> None:
    """After a frame went, nothing more is written until the analysis process says it waits (no batch, gathering or
    flush forces it), then everything waiting goes at once, in frames of a batch, without waiting out the gathering."""
    outbox = Outbox(1000, 10, 100, 30.0)
    sender = ReadySender(outbox)
    thread = sender.run()
    try:
        outbox.put([("a", entry("a", n)) for n in range(10)])  # a batch, and the process waits (a new one): sent
        assert flows_in(sender.until(1)[0][1]) == [f"a:{n}" for n in range(10)]
        outbox.put([("b", entry("b", n)) for n in range(25)])  # while it works: held, batches and a flush alike
        outbox.poke(flush=True)
        time.sleep(0.3)
        assert len(sender.frames) == 1 and outbox.depth == 25
        sender.waits()
        frames = sender.until(4)
        assert [len(flows_in(p)) for _, p in frames[1:]] == [10, 10, 5]
        assert outbox.depth == 0 and outbox.take_sent() == 35
        outbox.poke()
        thread.join(5)
        assert not thread.is_alive() and sender.result == (0, 0)
    finally:
        sender.close()


def test_ready_mode_gathers_while_analysis_waits_and_sees_a_batch_on_its_own_tick() -> None:
    """While the process waits, flows are gathered as in the other mode: a batch goes within a tick (no producer wakes
    the sender), what waited while the process worked goes as soon as it waits, a flush goes at once, a short gathering
    ends by itself, and a put after a quiet spell wakes a sleeping sender."""
    outbox = Outbox(1000, 10, 100, 30.0)
    sender = ReadySender(outbox)
    thread = sender.run()
    try:
        outbox.put([("a", entry("a", n)) for n in range(4)])
        time.sleep(0.3)
        assert sender.frames == []  # gathering (30 s)
        outbox.put([("a", entry("a", n)) for n in range(4, 12)])
        assert flows_in(sender.until(1)[0][1]) == [f"a:{n}" for n in range(10)]
        sender.waits()  # the two left waited while it worked: they go now
        assert flows_in(sender.until(2)[1][1]) == ["a:10", "a:11"]
        sender.waits()
        time.sleep(0.2)  # the sender has read it: what comes now is gathered
        outbox.put([("b", entry("b", n)) for n in range(3)])
        time.sleep(0.3)
        assert len(sender.frames) == 2 and outbox.depth == 3  # gathering again
        outbox.poke(flush=True)
        assert flows_in(sender.until(3)[2][1]) == ["b:0", "b:1", "b:2"]
        outbox.poke()
        thread.join(5)
        assert not thread.is_alive()
    finally:
        sender.close()
    short = Outbox(1000, 100, 100, 0.02)
    sender = ReadySender(short)
    sender.run()
    try:
        time.sleep(0.4)  # past OUTBOX_LINGER with nothing to send: asleep until a put wakes it
        short.put([("a", entry("a", 1))])
        assert flows_in(sender.until(1)[0][1]) == ["a:1"]
        sender.waits()
        time.sleep(0.2)
        short.put([("a", entry("a", 2))])  # gathered 20 ms, then sent by the ticking sender itself
        assert flows_in(sender.until(2)[1][1]) == ["a:2"]
    finally:
        sender.close()


def test_ready_mode_comes_back_when_asked_and_when_the_process_is_gone() -> None:
    """A poke or close brings run() back while it waits for the process; a process gone (its ready socket closed)
    lets the next frame fail, counted as lost, instead of waiting for a byte that never comes."""
    outbox = Outbox(1000, 4, 100, 30.0)
    sender = ReadySender(outbox)
    thread = sender.run()
    try:
        outbox.put([("a", entry("a", n)) for n in range(4)])
        sender.until(1)  # now it works: run() waits for its byte
        outbox.poke()
        thread.join(5)
        assert not thread.is_alive() and sender.result == (0, 0)
        thread = sender.run()
        outbox.close()
        thread.join(5)
        assert not thread.is_alive() and sender.result == (0, 0)
    finally:
        sender.close()
    outbox = Outbox(1000, 4, 100, 30.0)
    sender = ReadySender(outbox)
    thread = sender.run()
    try:
        outbox.put([("a", entry("a", n)) for n in range(4)])
        sender.until(1)
        outbox.put([("a", entry("a", n)) for n in range(4, 7)])  # held: the process works
        sender.theirs.shutdown(socket.SHUT_RDWR)  # the process dies: both its ends close
        sender.ready_theirs.close()
        thread.join(5)
        assert not thread.is_alive() and sender.result == (3, errno.EPIPE)
    finally:
        sender.close()
