"""FairQueue: a bounded queue of flows shared fairly between agents.

Each agent has its own line, the consumer serves the lines in turn, and when the queue is full a
newcomer takes the place of the newest flow of the agent holding the most. One agent's flood
therefore costs that agent's flows, not the others'. Drops are counted, never silent.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from itertools import groupby
from operator import attrgetter, itemgetter

from appliance.flows.record_codec import AnyDns
from appliance.model import DnsMessage, FlowRecord

# Flows taken from each agent's line per round: fair to within this many flows, without taking the
# lock once per flow.
PER_AGENT_ROUND = 16
_agent_of = attrgetter("agent_id")
_now = time.monotonic  # when a run of flows came (a module name: the tests set the clock)


class FairQueue:
    """At most `size` flows waiting or being worked on; producers never block.

    `put_many` admits flows under the bound (dropping as described above, counted in `dropped` and
    per agent in `dropped_by_agent`, and reported to `on_drop`); `take_round` waits for work and takes
    a few flows of every agent; `done` says the flows of the last round are finished.

    An agent's line holds the runs of flows it was handed (one ingest call's ended flows, ~20), not single
    flows: joining and leaving the queue cost a few list operations per run instead of a deque push and pop
    per flow, which were most of the queue's cost on the ingest and sending threads. Each run's arrival time
    (monotonic) is kept beside it, so `oldest_wait()` says how long the oldest flow waiting has waited.
    """

    def __init__(self, size: int, on_drop: Callable[[str, int], None] | None = None, wake_at: int = 1) -> None:
        self.size = size
        # A consumer waits only when the queue is empty, so a producer wakes it when the first flow comes
        # in, and again when `wake_at` flows wait (a consumer gathering a batch, see AnalysisProcess):
        # not at every put, which cost a wake-up and interpreter-lock hand-offs per ended flow batch.
        self.wake_at = wake_at
        self._lines: dict[str, deque[list[FlowRecord]]] = {}  # agent -> its runs of flows, oldest first
        self._since: dict[str, deque[float]] = {}  # agent -> when each of its runs came (time.monotonic), as _lines
        self._held: dict[str, int] = {}  # agent -> flows in its line
        self._depth = 0
        self._busy = 0
        self._on_drop = on_drop
        self.dropped = 0
        self.dropped_by_agent: Counter[str] = Counter()
        self.cond = threading.Condition()
        self._closing = False

    # -- producers ------------------------------------------------------------------------------
    def put_many(self, flows: list[FlowRecord]) -> None:
        dropped: Counter[str] | None = None  # made only when the bound is reached (a Counter is a microsecond)
        with self.cond:
            before = self._depth
            if before + self._busy + len(flows) <= self.size:
                # Room for all (nearly always): each agent's run joins its line at once (the flows of one
                # ended-flow batch are mostly one agent's).
                lines, held, since, now = self._lines, self._held, self._since, _now()
                for agent_id, group in groupby(flows, _agent_of):
                    run = list(group)
                    line = lines.get(agent_id)
                    if line is None:
                        lines[agent_id] = deque((run,))
                        since[agent_id] = deque((now,))
                        held[agent_id] = len(run)
                    else:
                        line.append(run)
                        since[agent_id].append(now)
                        held[agent_id] += len(run)
                self._depth += len(flows)
            else:
                dropped = Counter()
                for flow in flows:
                    victim = self._admit(flow)
                    if victim is not None:
                        dropped[victim] += 1
                if dropped:
                    self.dropped += sum(dropped.values())
                    self.dropped_by_agent.update(dropped)
            if (not before and self._depth) or before < self.wake_at <= self._depth:
                self.cond.notify_all()
        if dropped and self._on_drop is not None:
            for agent_id, count in dropped.items():
                self._on_drop(agent_id, count)

    def _admit(self, flow: FlowRecord) -> str | None:
        """Queue one flow (under the lock); the agent whose flow was dropped to keep the bound, if any."""
        agent_id = flow.agent_id
        held = self._held
        mine = held.get(agent_id, 0)
        if self._depth + self._busy >= self.size:
            longest_id, longest = max(held.items(), key=itemgetter(1), default=("", 0))
            if longest_id == agent_id or longest <= mine + 1:
                return agent_id  # this agent already holds its share: its new flow is the one dropped
            self._pop_newest(longest_id)  # the newest flow of the agent holding the most makes room
            victim: str | None = longest_id
        else:
            victim = None
        line = self._lines.get(agent_id)
        if line is None:
            self._lines[agent_id] = deque(([flow],))
            self._since[agent_id] = deque((_now(),))
            held[agent_id] = 1
        else:
            line.append([flow])
            self._since[agent_id].append(_now())
            held[agent_id] = mine + 1
        self._depth += 1
        return victim

    def _pop_newest(self, agent_id: str) -> None:
        line = self._lines[agent_id]
        newest = line[-1]
        newest.pop()
        if not newest:
            line.pop()
            self._since[agent_id].pop()
        self._held[agent_id] -= 1
        if not line:
            del self._lines[agent_id], self._held[agent_id], self._since[agent_id]
        self._depth -= 1

    # -- the consumer -----------------------------------------------------------------------------
    @property
    def depth(self) -> int:
        """Flows waiting (not yet taken)."""
        return self._depth

    @property
    def idle(self) -> bool:
        return not self._depth and not self._busy

    def oldest_wait(self) -> float:
        """Seconds the oldest flow waiting has waited (0.0 when none waits): how far behind analysis is."""
        with self.cond:
            if not self._since:
                return 0.0
            return max(_now() - min(times[0] for times in self._since.values()), 0.0)

    def take_round(self, limit: int = 0, timeout: float | None = None) -> list[FlowRecord] | None:
        """A few flows of every agent, in turn (at most `limit` when given); None once closed and empty.

        Waits up to `timeout` (None: for ever) for work; returns [] when it ran out. The flows taken
        count against the bound until `done()`.
        """
        with self.cond:
            if not self._depth and not self._closing:
                self.cond.wait(timeout)
            if not self._depth:
                return None if self._closing else []
            batch: list[FlowRecord] = []
            lines, held, since = self._lines, self._held, self._since
            while lines and (not limit or len(batch) < limit):
                # An equal share of what the limit leaves for each agent, at least PER_AGENT_ROUND: one pass when
                # few agents wait (one agent's 256 flows in one step, not sixteen).
                share = max(PER_AGENT_ROUND, (limit - len(batch)) // len(lines)) if limit else PER_AGENT_ROUND
                for agent_id in list(lines):
                    take = min(share, limit - len(batch)) if limit else share
                    line = lines[agent_id]
                    taken = 0
                    while line and taken < take:
                        run = line[0]
                        if len(run) <= take - taken:
                            batch.extend(run)
                            taken += len(run)
                            line.popleft()
                            since[agent_id].popleft()
                        else:  # part of a run: the rest stays first in line
                            cut = take - taken
                            batch.extend(run[:cut])
                            del run[:cut]
                            taken = take
                    if line:
                        held[agent_id] -= taken
                    else:
                        del lines[agent_id], held[agent_id], since[agent_id]
                    if limit and len(batch) >= limit:
                        break
                if not limit:
                    break
            self._depth -= len(batch)
            self._busy += len(batch)
            return batch

    def done(self, count: int) -> None:
        with self.cond:
            self._busy -= count
            self.cond.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until nothing is queued or being worked on."""
        with self.cond:
            return self.cond.wait_for(lambda: self.idle, timeout)

    def close(self) -> None:
        """Wake the consumer for good: `take_round` returns None once the queue is empty."""
        with self.cond:
            self._closing = True
            self.cond.notify_all()

    def reopen(self) -> None:
        with self.cond:
            self._closing = False


class QueueFigures:
    """What the metrics read of a component that owns a FairQueue as `_queue`."""

    _queue: FairQueue

    @property
    def queue_depth(self) -> int:
        return self._queue.depth

    @property
    def flows_dropped(self) -> int:
        return self._queue.dropped

    @property
    def dropped_by_agent(self) -> dict[str, int]:
        return self._queue.dropped_by_agent

    @property
    def oldest_wait_s(self) -> float:
        return self._queue.oldest_wait()


DNS_PENDING_MAX = 10_000  # DNS items waiting for a sender; beyond this they are dropped and counted


class QueuedHandOff(QueueFigures):
    """The producer side of a sink that a sender thread empties (the analysis process, the cluster's
    Redis streams): ended flows into a FairQueue, DNS answers and resolver events into a bounded line
    that the sender sends ahead of the flows they explain. Producers never block."""

    def __init__(self, queue_size: int, on_drop: Callable[[str, int], None] | None = None, wake_at: int = 1) -> None:
        self._queue = FairQueue(queue_size, on_drop, wake_at)
        self._dns: deque[tuple[str, AnyDns, bool]] = deque()
        self.dns_dropped = 0

    def _wake_sender(self, dns_before: int) -> None:
        """Under the lock, after DNS items went in: wake the sender when the hand-off was empty (it sleeps
        only then) or when a batch's worth of DNS items waits."""
        if (not dns_before and not self._queue.depth) or dns_before < self._queue.wake_at <= len(self._dns):
            self._queue.cond.notify_all()

    def submit_many(self, flows: list[FlowRecord]) -> None:
        self._queue.put_many(flows)

    def observe_answers(self, answers: list[tuple[str, AnyDns]]) -> None:
        """A batch's DNS answers (what the resolver cache learns from), under one lock and one wake-up: one
        of each per answer cost the ingest thread more than the answers' parse."""
        with self._queue.cond:
            room = DNS_PENDING_MAX - len(self._dns)
            if room < len(answers):
                self.dns_dropped += len(answers) - max(room, 0)
                answers = answers[: max(room, 0)]
            if answers:
                before = len(self._dns)
                self._dns.extend([(agent_id, message, False) for agent_id, message in answers])
                self._wake_sender(before)

    def observe_dns(self, agent_id: str, message: DnsMessage) -> None:
        self._put_dns((agent_id, message, True))

    def _put_dns(self, item: tuple[str, AnyDns, bool]) -> None:
        with self._queue.cond:
            if len(self._dns) >= DNS_PENDING_MAX:
                self.dns_dropped += 1
                return
            self._dns.append(item)
            self._wake_sender(len(self._dns) - 1)
