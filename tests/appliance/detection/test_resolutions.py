"""ResolverCache.observe_many (a batch under one lock, known addresses updated in place) against the
one-message-at-a-time code it replaced (resolutions_reference.py): the same state and answers."""

from __future__ import annotations

import random

from appliance.detection.resolutions import ResolverCache
from appliance.model import DnsAnswer, DnsMessage
from tests.appliance.detection.resolutions_reference import ResolverCacheReference

_NS = 1_000_000_000


def _state(cache: ResolverCache) -> tuple:
    by_ip = {a: [(ip, r.name, r.names, r.seen_ns, r.ttl_s, tuple(r.times)) for ip, r in m.items()] for a, m in cache._by_ip.items()}
    by_name = {a: list(m.items()) for a, m in cache._by_name.items()}
    return by_ip, by_name, cache.responses_seen


def _messages(rng: random.Random, count: int) -> list[tuple[str, DnsMessage]]:
    names = [f"n{i}.example" for i in range(12)] + ["", "x.test"]
    addresses = [f"192.0.2.{i}" for i in range(10)] + ["2001:db8::1", "2001:db8::2"]
    out = []
    ts = 10 * _NS
    for _ in range(count):
        ts += rng.choice([0, 1, 300_000_000, 1_500_000_000, 60 * _NS, -3 * _NS, -ts // 2])  # back in time too
        answers = []
        for _ in range(rng.choice([0, 1, 1, 2, 3, 5])):
            rtype = rng.choice([1, 1, 28, 5, 5, 16, 15, 2])
            data = rng.choice(addresses) if rtype in (1, 28) else rng.choice(names + ["txt"])
            answers.append(DnsAnswer(rng.choice(names), rtype, rng.choice([0, 30, 300, 86400]), data))
        out.append((rng.choice(["a", "b", "c"]), DnsMessage(rng.getrandbits(16), rng.random() < 0.9, rng.choice([0, 0, 3]),
                                                          rng.choice(names), 1, 1, answers, False, max(ts, 0))))
    return out


def test_batches_and_single_messages_leave_the_state_the_reference_leaves():
    rng = random.Random(11)
    for max_per_agent in (3, 8, 50_000):  # small bounds: eviction by recency on both maps
        items = _messages(rng, 4000)
        reference, single, batched = (ResolverCacheReference(max_per_agent), ResolverCache(max_per_agent),
                                      ResolverCache(max_per_agent))
        i = 0
        while i < len(items):
            n = rng.randint(1, 40)
            for agent_id, message in items[i : i + n]:
                reference.observe(agent_id, message)
                single.observe(agent_id, message)
            batched.observe_many(items[i : i + n])
            i = min(i + n, len(items))
            assert _state(single) == _state(reference) == _state(batched)
            for agent_id in ("a", "b", "c"):
                for address in ("192.0.2.1", "192.0.2.7", "2001:db8::2", "198.51.100.1"):
                    at = items[i - 1][1].timestamp_ns + rng.choice([-5 * _NS, 0, 40 * _NS, 900 * _NS])
                    want = reference.lookup(agent_id, address, at, 120)
                    for cache in (single, batched):
                        got = cache.lookup(agent_id, address, at, 120)
                        assert (got is None) == (want is None)
                        if got is not None:
                            assert (got.name, got.names, got.seen_ns, got.ttl_s, got.times) == (
                                want.name, want.names, want.seen_ns, want.ttl_s, want.times)
                    assert single.name_resolved(agent_id, "n3.example", at, 120) == reference.name_resolved(
                        agent_id, "n3.example", at, 120)
        assert reference.responses_seen > 1000
        assert any(len(r.times) > 20 for m in reference._by_ip.values() for r in m.values()) or max_per_agent < 50_000
