"""SharedPrevalence: how many agents reach a destination, counted over every analyzer.

Beaconing ignores destinations that many agents talk to (push services, update checks). An analyzer
sees only its partitions' agents, so each one's count would be a fraction of the fleet's and shared
infrastructure would start to look like beacons. Here every analyzer adds its agents' visits to
`prev:<address>:<port>` (a sorted set: agent -> last event time, kept `KEEP_SECONDS` unvisited) after
each read, and asks it when a series is long enough to judge. Redis trouble never stops analysis: the
question is answered with what this analyzer knows itself, and counted.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

KEEP_SECONDS = 7200  # twice the default prevalence window (analysis config beaconing.prevalence_window_s)
MAX_PENDING = 100_000  # destinations buffered between flushes; beyond, the oldest visits wait for the next


def prevalence_key(destination: tuple[int, int]) -> str:
    return f"prev:{destination[0]}:{destination[1]}"


class SharedPrevalence:
    """The behaviour layer's FleetPrevalence on Redis (one per analyzer; used from its one thread)."""

    def __init__(self) -> None:
        self.client: Any = None  # set by the analyzer once connected
        self._pending: dict[tuple[int, int], dict[str, int]] = {}
        self.errors = 0

    def visited(self, destination: tuple[int, int], agent_id: str, seen_ns: int) -> None:
        agents = self._pending.get(destination)
        if agents is None:
            if len(self._pending) >= MAX_PENDING:
                return
            agents = self._pending[destination] = {}
        if seen_ns > agents.get(agent_id, -1):
            agents[agent_id] = seen_ns

    def agents(self, destination: tuple[int, int], since_ns: int) -> set[str]:
        import redis

        if self.client is None:
            return set()
        try:
            members = self.client.zrangebyscore(prevalence_key(destination), since_ns, "+inf")
        except redis.RedisError:
            self.errors += 1
            return set()
        return {m.decode() for m in members}

    def flush(self) -> None:
        """Add the visits seen since the last flush (raises redis errors: the caller's loop handles them)."""
        if not self._pending or self.client is None:
            return
        pipe = self.client.pipeline(transaction=False)
        for destination, agents in self._pending.items():
            key = prevalence_key(destination)
            pipe.zadd(key, agents, gt=True)
            pipe.expire(key, KEEP_SECONDS)
        pipe.execute()
        self._pending.clear()
