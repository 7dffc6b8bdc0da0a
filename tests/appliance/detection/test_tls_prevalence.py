"""FingerprintPrevalence, which the TLS detector asks on every handshake: None for a fingerprint the agent has
shown before (nothing to judge), else what the rarity test reads, exactly as the full account it replaced
(kept below as the model) says, through eviction of agents and fingerprints and the per-fingerprint cap."""

from __future__ import annotations

import random

from appliance.detection.dpi.tls import FingerprintPrevalence

_NS = 1_000_000_000


class AccountModel:
    """The account before: every handshake answered (new to this agent, other agents, seconds watched,
    handshakes before)."""

    def __init__(self, max_fingerprints: int, max_agents: int) -> None:
        self.agents_of: dict[str, set[str]] = {}
        self.watched: dict[str, list[int]] = {}
        self.max_fingerprints, self.max_agents = max_fingerprints, max_agents

    def observe(self, agent_id: str, fingerprint: str, now_ns: int) -> tuple[bool, int, float, int]:
        watched = self.watched.get(agent_id)
        if watched is None:
            if len(self.watched) >= self.max_fingerprints:
                del self.watched[next(iter(self.watched))]
            watched = self.watched[agent_id] = [now_ns, 0]
        seen_s, handshakes = max(now_ns - watched[0], 0) / _NS, watched[1]
        watched[1] += 1
        agents = self.agents_of.get(fingerprint)
        if agents is None:
            if len(self.agents_of) >= self.max_fingerprints:
                del self.agents_of[next(iter(self.agents_of))]
            agents = self.agents_of[fingerprint] = set()
        new = agent_id not in agents
        others = len(agents) - (0 if new else 1)
        if new and len(agents) < self.max_agents:
            agents.add(agent_id)
        return new, others, seen_s, handshakes


def test_observe_answers_as_the_full_account_through_evictions_and_caps() -> None:
    rng = random.Random(15)
    for max_fingerprints, max_agents in ((100_000, 64), (5, 3), (2, 1)):
        got, model = FingerprintPrevalence(max_fingerprints, max_agents), AccountModel(max_fingerprints, max_agents)
        now = 1_700_000_000 * _NS
        new_seen = 0
        for _ in range(20_000):
            now += rng.randrange(-_NS, 30 * _NS)  # analysis runs behind ingestion: time may step back a little
            agent, fingerprint = f"agent{rng.randrange(12)}", f"t13d{rng.randrange(9):04d}h2"
            new, others, seen_s, handshakes = model.observe(agent, fingerprint, now)
            answer = got.observe(agent, fingerprint, now)
            assert answer == (None if not new else (others, seen_s, handshakes))
            new_seen += new
        assert 100 < new_seen < 20_000  # both answers are reached
