"""FairQueue: bounded, fair between agents, drops counted per agent, never blocks a producer."""

from __future__ import annotations

import threading

from appliance.analysis import fair_queue
from appliance.analysis.fair_queue import FairQueue
from appliance.model import FlowRecord, Transport


def flow(agent: str, n: int) -> FlowRecord:
    return FlowRecord(f"{agent}-{n}", agent, 17, Transport.UDP, 1, 1000 + n, 2, 53, n, n)


def test_a_round_with_a_limit_takes_at_most_the_limit_in_turn_between_agents() -> None:
    queue = FairQueue(1000)
    queue.put_many([flow("a", i) for i in range(100)] + [flow("b", i) for i in range(5)])
    batch = queue.take_round(limit=40, timeout=0)
    assert batch is not None and len(batch) == 40
    assert sum(f.agent_id == "b" for f in batch) == 5  # b's five are not starved behind a's hundred
    rest = queue.take_round(limit=1000, timeout=0)
    assert rest is not None and len(rest) == 65 and queue.depth == 0
    assert queue.take_round(limit=10, timeout=0) == []


def test_each_agent_keeps_its_order_when_a_round_cuts_a_run_of_flows() -> None:
    """Lines hold the runs producers handed over: a limit that ends inside a run leaves its rest first in line."""
    queue = FairQueue(1000)
    for start in (0, 10, 20):
        queue.put_many([flow("a", i) for i in range(start, start + 10)])
    first = queue.take_round(limit=15, timeout=0)
    rest = queue.take_round(limit=100, timeout=0)
    assert first is not None and rest is not None
    assert [f.local_port - 1000 for f in first] == list(range(15))
    assert [f.local_port - 1000 for f in rest] == list(range(15, 30))
    assert queue.depth == 0


def test_agents_share_a_limited_round_equally_whatever_the_size_of_their_runs() -> None:
    queue = FairQueue(1000)
    queue.put_many([flow("a", i) for i in range(100)])  # one run of 100
    for i in range(100):
        queue.put_many([flow("b", i)])  # a hundred runs of one
    batch = queue.take_round(limit=64, timeout=0)
    assert batch is not None and len(batch) == 64
    assert sum(f.agent_id == "a" for f in batch) == 32 and sum(f.agent_id == "b" for f in batch) == 32
    unlimited = queue.take_round(timeout=0)  # no limit: a few of every agent (the in-process pipeline's rounds)
    assert unlimited is not None and len(unlimited) == 32


def test_a_full_queue_drops_the_newest_flow_of_the_agent_holding_the_most() -> None:
    queue = FairQueue(10)
    queue.put_many([flow("flood", i) for i in range(5)])
    queue.put_many([flow("flood", i) for i in range(5, 9)])
    queue.put_many([flow("quiet", 0)])
    queue.put_many([flow("quiet", 1), flow("quiet", 2)])  # full: flood's two newest make room
    assert queue.dropped_by_agent == {"flood": 2}
    taken = queue.take_round(limit=100, timeout=0)
    assert taken is not None
    assert sorted(f.local_port - 1000 for f in taken if f.agent_id == "flood") == list(range(7))
    assert [f.local_port - 1000 for f in taken if f.agent_id == "quiet"] == [0, 1, 2]


def test_the_bound_holds_and_the_flooding_agent_pays_for_it() -> None:
    drops: list[tuple[str, int]] = []
    queue = FairQueue(10, on_drop=lambda agent, n: drops.append((agent, n)))
    queue.put_many([flow("flood", i) for i in range(50)])
    queue.put_many([flow("quiet", i) for i in range(3)])
    assert queue.depth == 10
    assert queue.dropped == 43 and queue.dropped_by_agent == {"flood": 43}
    taken = queue.take_round(limit=100, timeout=0)
    assert taken is not None and sum(f.agent_id == "quiet" for f in taken) == 3
    assert sum(n for _, n in drops) == 43


def test_flows_taken_count_against_the_bound_until_done() -> None:
    queue = FairQueue(4)
    queue.put_many([flow("a", i) for i in range(4)])
    batch = queue.take_round(limit=4, timeout=0)
    assert batch is not None and not queue.idle
    queue.put_many([flow("a", 9)])
    assert queue.dropped == 1  # the four in work still hold their places
    assert not queue.wait_idle(0.05)
    queue.done(len(batch))
    assert queue.wait_idle(1)


def test_a_waiting_consumer_is_woken_by_a_producer_and_by_close() -> None:
    queue = FairQueue(10)
    got: list[object] = []
    consumer = threading.Thread(target=lambda: got.append(queue.take_round(limit=5, timeout=10)))
    consumer.start()
    queue.put_many([flow("a", 1)])
    consumer.join(30)
    assert [f.flow_id for f in got[0]] == ["a-1"]  # type: ignore[union-attr]
    closer = threading.Thread(target=lambda: got.append(queue.take_round(timeout=10)))
    closer.start()
    queue.close()
    closer.join(30)
    assert got[1] is None


def test_dns_answers_are_taken_a_batch_at_a_time_under_their_bound() -> None:
    from appliance.analysis import fair_queue

    hand_off = fair_queue.QueuedHandOff(queue_size=10)
    bound = fair_queue.DNS_PENDING_MAX
    hand_off.observe_answers([("a", b"m%d" % i) for i in range(bound - 2)])
    hand_off.observe_dns("a", "event")  # type: ignore[arg-type]
    hand_off.observe_answers([("b", b"x"), ("b", b"y"), ("b", b"z")])  # one fits
    assert len(hand_off._dns) == bound and hand_off.dns_dropped == 2
    assert list(hand_off._dns)[-2:] == [("a", "event", True), ("b", b"x", False)]  # in order, flagged by source
    hand_off.observe_answers([("c", b"w")])
    assert hand_off.dns_dropped == 3


def test_a_batch_of_dns_answers_wakes_a_waiting_sender() -> None:
    """The sender is woken by the batch, not by its own timeout: it is waiting (the lock released in wait) when
    the batch comes, and returns at once."""
    import time

    from appliance.analysis import fair_queue

    hand_off = fair_queue.QueuedHandOff(queue_size=10)
    waiting = threading.Event()
    waited: list[float] = []

    def sender() -> None:
        with hand_off._queue.cond:
            waiting.set()  # observe_answers can take the lock only once wait_for has released it
            start = time.monotonic()
            hand_off._queue.cond.wait_for(lambda: hand_off._dns, timeout=10)
            waited.append(time.monotonic() - start)

    thread = threading.Thread(target=sender)
    thread.start()
    assert waiting.wait(5)
    hand_off.observe_answers([("a", b"1"), ("a", b"2")])
    thread.join(15)
    assert waited and waited[0] < 2  # without the wake-up it waits the whole 10 s
    assert [m for _, m, _ in hand_off._dns] == [b"1", b"2"]


def test_a_producer_wakes_the_consumer_for_the_first_flow_and_at_wake_at_not_at_every_put() -> None:
    """A consumer sleeps only on an empty queue, so the first flow wakes it; one gathering a batch
    (AnalysisProcess) is woken again when `wake_at` flows wait. Puts in between wake nobody."""
    queue = FairQueue(1000, wake_at=8)
    wakes: list[int] = []
    notify_all = queue.cond.notify_all
    queue.cond.notify_all = lambda: (wakes.append(queue.depth), notify_all())  # type: ignore[method-assign]
    queue.put_many([flow("a", 1), flow("a", 2)])
    queue.put_many([flow("b", 3)])
    queue.put_many([flow("a", n) for n in range(4, 10)])  # 9 waiting: past wake_at
    queue.put_many([flow("a", 10)])
    assert wakes == [2, 9]
    queue.take_round()
    queue.put_many([flow("c", 11)])  # empty again: the first flow wakes
    assert wakes == [2, 9, 1]


def test_dns_items_wake_the_sender_of_an_empty_hand_off_and_at_a_batch() -> None:
    from appliance.analysis import fair_queue

    hand_off = fair_queue.QueuedHandOff(queue_size=100, wake_at=4)
    wakes: list[int] = []
    cond = hand_off._queue.cond
    notify_all = cond.notify_all
    cond.notify_all = lambda: (wakes.append(len(hand_off._dns)), notify_all())  # type: ignore[method-assign]
    hand_off.observe_answers([("a", b"1")])  # the hand-off was empty: wake
    hand_off.observe_answers([("a", b"2")])
    hand_off.observe_dns("a", "event")  # type: ignore[arg-type]
    hand_off.observe_answers([("a", b"3"), ("a", b"4")])  # 5 waiting: past wake_at
    assert wakes == [1, 5]
    hand_off._dns.clear()
    hand_off.submit_many([flow("a", 1)])  # flows wait: the sender is awake or gathering, no wake for DNS
    hand_off.observe_answers([("a", b"5")])
    assert wakes == [1, 5, 0]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_oldest_wait_follows_the_oldest_run_waiting_through_rounds_cuts_and_drops(monkeypatch) -> None:
    """How long the oldest flow waiting has waited (the metrics' analysis_queue_oldest_s, thread mode and the cluster's
    ingest nodes): a run cut by a round keeps its time, and drops take their runs' times with them."""
    clock = Clock()
    monkeypatch.setattr(fair_queue, "_now", clock)
    queue = FairQueue(12)
    assert queue.oldest_wait() == 0.0
    queue.put_many([flow("a", i) for i in range(5)])  # one run at 1000
    clock.now = 1003.0
    queue.put_many([flow("b", i) for i in range(5)])  # one run at 1003
    clock.now = 1010.0
    assert queue.oldest_wait() == 10.0
    first = queue.take_round(limit=4, timeout=0)
    assert [f.flow_id for f in first or []] == ["a-0", "a-1", "a-2", "a-3"]  # a's run cut: a-4 keeps 1000
    assert queue.oldest_wait() == 10.0
    clock.now = 1011.0
    queue.put_many([flow("c", i) for i in range(4)])  # over the bound: flow by flow, b's newest and c's last dropped
    assert queue.dropped_by_agent == {"b": 1, "c": 1} and queue.depth == 8
    assert all(len(queue._since[agent]) == len(queue._lines[agent]) for agent in queue._lines)
    rest = queue.take_round(limit=6, timeout=0)
    assert [f.flow_id for f in rest or []] == ["a-4", "b-0", "b-1", "b-2", "b-3", "c-0"]
    clock.now = 1020.0
    assert queue.oldest_wait() == 9.0  # c-1, put at 1011
    assert [f.flow_id for f in queue.take_round(limit=10, timeout=0) or []] == ["c-1", "c-2"]
    assert queue.oldest_wait() == 0.0 and queue._since == {} and queue._lines == {}


def test_oldest_wait_is_the_next_run_once_the_oldest_is_taken(monkeypatch) -> None:
    clock = Clock()
    monkeypatch.setattr(fair_queue, "_now", clock)
    queue = FairQueue(100)
    queue.put_many([flow("a", 0)])
    clock.now = 1004.0
    queue.put_many([flow("a", 1)])
    clock.now = 1005.0
    assert queue.oldest_wait() == 5.0
    assert [f.flow_id for f in queue.take_round(limit=1, timeout=0) or []] == ["a-0"]
    assert queue.oldest_wait() == 1.0
