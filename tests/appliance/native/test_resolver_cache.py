"""resolver_cache.h (ResolverCache.observe_many and .lookup in C) against the Python it replaced
(tests/appliance/detection/resolutions_reference.py): the same state, the same answers, including the numbers
its 64-bit fast path does not take (huge or negative times, TTLs past 2**53, float times) and long histories
that must be thinned. Runs under ASan/UBSan too (test_sanitized.py)."""

from __future__ import annotations

import random

import pytest

from appliance.detection.resolutions import _RESOLUTION_MAKER, Resolution, ResolverCache, _thin
from appliance.model import DnsAnswer, DnsMessage, ip_int, ip_str
from appliance.native import dpi as native_dpi
from tests.appliance.detection.resolutions_reference import ResolverCacheReference

_NS = 1_000_000_000
_ADDRESSES = [f"192.0.2.{i}" for i in range(6)] + ["2001:db8::1"]
_NAMES = [f"n{i}.example" for i in range(8)]


def _state(cache: ResolverCache) -> tuple:
    by_ip = {a: [(ip, r.name, r.names, r.seen_ns, r.ttl_s, list(r.times)) for ip, r in m.items()]
             for a, m in cache._by_ip.items()}
    return by_ip, {a: list(m.items()) for a, m in cache._by_name.items()}, cache.responses_seen


def _message(rng: random.Random, ts: object, answers: int) -> DnsMessage:
    out = []
    for _ in range(answers):
        rtype = rng.choice([1, 1, 1, 28, 5, 5, 16, 2])
        data = rng.choice(_ADDRESSES) if rtype in (1, 28) else rng.choice(_NAMES)
        ttl = rng.choice([0, 30, 300, 86400, 2**60, 2**70, -5])  # past the fast path too
        out.append(DnsAnswer(rng.choice(_NAMES), rtype, ttl, data))
    return DnsMessage(1, rng.random() < 0.95, 0, rng.choice(_NAMES + [""]), 1, 1, out, False, ts)  # type: ignore[arg-type]


def _times(rng: random.Random, count: int, huge: bool) -> list[object]:
    ts = 5 * _NS
    out: list[object] = []
    for _ in range(count):
        ts += rng.choice([0, 10, _NS, 1_500_000_000, 2 * _NS, 61 * _NS, -3 * _NS])
        out.append(ts)
    if huge:  # numbers the C takes through the Python number protocol: the answers must not change
        for i in rng.sample(range(count), count // 10):
            out[i] = rng.choice([2**62 + rng.randrange(10**12), -(2**63) - 7, 2**80, -(10**9) * 3, float(out[i])])
    return out


@pytest.mark.parametrize("huge", [False, True])
@pytest.mark.parametrize("max_per_agent", [2, 5, 50_000])
def test_observe_many_and_lookup_leave_and_answer_what_the_python_did(huge, max_per_agent):
    rng = random.Random(f"{huge}{max_per_agent}")
    times = _times(rng, 3000, huge)
    items = [(rng.choice("abc"), _message(rng, ts, rng.choice([0, 1, 2, 3, 20]))) for ts in times]  # 20: heap path
    reference, cache = ResolverCacheReference(max_per_agent), ResolverCache(max_per_agent)
    i = 0
    while i < len(items):
        n = rng.randint(1, 50)
        for agent_id, message in items[i : i + n]:
            reference.observe(agent_id, message)
        cache.observe_many([(*item, False) for item in items[i : i + n]])  # decode_dns items: a third field
        i += n
        assert _state(cache) == _state(reference)
        for _ in range(6):
            agent_id, address = rng.choice("abcz"), rng.choice(_ADDRESSES + ["198.51.100.9"])
            at = rng.choice([t for t in times[max(0, i - 50) : i] if isinstance(t, int)] or [0])
            at += rng.choice([-5 * _NS, 0, 2 * _NS, 40 * _NS, 10**6 * _NS, 2**64])
            window = rng.choice([0.0, 120.0, 3600, 1e-9])
            slack = rng.choice([2.0, 0.0, 1, 1e12])
            got = cache.lookup(agent_id, address, at, window, slack)
            assert got is ResolverCacheReference.lookup(cache, agent_id, address, at, window, slack)  # same object
            assert cache.lookup_function()(agent_id, address, at, window, slack) is got
            if slack == 2.0:  # the default
                assert cache.lookup_function()(agent_id, address, at, window) is got is cache.lookup(
                    agent_id, address, at, window)
            want = reference.lookup(agent_id, address, at, window, slack)
            assert (got is None) == (want is None)
            if ":" not in address:  # the TLS detector asks with the flow's address as an int
                assert cache.lookup_function()(agent_id, ip_int(address), at, window, slack) is got
    assert reference.responses_seen > 1000
    if max_per_agent == 50_000:  # long histories were thinned on both sides
        assert max(len(r.times) for m in reference._by_ip.values() for r in m.values()) == 64


def test_a_history_past_its_bound_drops_the_time_that_adds_least_coverage():
    cache, reference = ResolverCache(), ResolverCacheReference()
    for k in range(200):
        ts = k * 60 * _NS + (k % 7) * 13 * _NS
        message = DnsMessage(1, True, 0, "a.example", 1, 1, [DnsAnswer("a.example", 1, 60, "192.0.2.1")], False, ts)
        cache.observe("agent", message)
        reference.observe("agent", message)
        assert cache._by_ip["agent"]["192.0.2.1"].times == reference._by_ip["agent"]["192.0.2.1"].times
    assert len(cache._by_ip["agent"]["192.0.2.1"].times) == 64


def test_lookup_raises_what_python_raises_for_a_slack_that_is_not_a_number():
    cache = ResolverCache()
    cache.observe("agent", DnsMessage(1, True, 0, "a.example", 1, 1, [DnsAnswer("a.example", 1, 60, "192.0.2.1")], False, 10))
    with pytest.raises(ValueError):
        cache.lookup("agent", "192.0.2.1", 10, 120.0, float("nan"))
    with pytest.raises(OverflowError):
        cache.lookup("agent", "192.0.2.1", 10, 120.0, float("inf"))


def test_the_helpers_refuse_what_is_not_their_state():
    maker = _RESOLUTION_MAKER
    message = DnsMessage(1, True, 0, "a.example", 1, 1, [DnsAnswer("a.example", 1, 60, "192.0.2.1")], False, 10)
    with pytest.raises(TypeError):
        native_dpi.resolver_observe([("agent",)], {}, {}, 10, maker, _thin)  # an item without its message
    with pytest.raises(TypeError):
        native_dpi.resolver_observe([("agent", message)], {"agent": {"192.0.2.1": "not a Resolution"}}, {}, 10, maker, _thin)
    with pytest.raises(TypeError):
        native_dpi.resolver_observe([("agent", message)], {}, {}, 10, object(), _thin)  # not a SlotMaker
    with pytest.raises(TypeError):
        native_dpi.resolver_lookup({"agent": {"192.0.2.1": ("not", "a", "Resolution")}}, maker, "agent", "192.0.2.1", 10,
                                   1.0, 2.0)
    with pytest.raises(TypeError):
        native_dpi.resolver_lookup({}, maker, "agent", "192.0.2.1", 10)  # no window
    with pytest.raises(AttributeError):
        native_dpi.resolver_observe([("agent", object())], {}, {}, 10, maker, _thin)
    broken = Resolution("a.example", ("a.example",), 10, 60, [])  # a Resolution is never without a time
    with pytest.raises(TypeError):
        native_dpi.resolver_observe([("agent", message)], {"agent": {"192.0.2.1": broken}}, {}, 10, maker, _thin)


def test_an_address_given_as_an_int_is_looked_up_as_ip_str_writes_it():
    rng = random.Random(3)
    values = [0, 1, 9, 10, 99, 100, 255, 256, 2**32 - 1, 0x0A000001, 0x64096300] + [rng.getrandbits(32) for _ in range(3000)]
    cache = ResolverCache()
    items = [("agent", DnsMessage(1, True, 0, "n.example", 1, 1, [DnsAnswer("n.example", 1, 60, ip_str(v))], False, 10))
             for v in values[::2]]
    cache.observe_many(items)
    for v in values:
        got = cache.lookup("agent", v, 10, 120.0)
        assert got is cache.lookup("agent", ip_str(v), 10, 120.0)
        assert (got is not None) == (ip_str(v) in cache._by_ip["agent"])
    assert sum(cache.lookup("agent", v, 10, 120.0) is not None for v in values) >= len(values) // 2
    for bad in (-1, 2**32, 2**70):
        with pytest.raises(ValueError):
            cache.lookup("agent", bad, 10, 120.0)
    assert cache.lookup("agent", True, 10, 120.0) is None  # not an int address: a key like any other


def test_an_answer_list_changed_while_it_is_read_is_read_as_python_reads_it():
    """A record type whose comparison empties the message's answers (no decoder makes one): the C stops where the
    Python loop stops, and touches no answer it no longer holds."""

    class Emptying:
        def __init__(self, answers: list[DnsAnswer]) -> None:
            self.answers = answers

        def __eq__(self, other: object) -> bool:
            self.answers.clear()
            return other == 1

        __hash__ = None  # type: ignore[assignment]

    states = []
    for cache in (ResolverCache(), ResolverCacheReference()):
        answers = [DnsAnswer("a.example", 1, 60, "192.0.2.1")]
        answers.insert(0, DnsAnswer("a.example", Emptying(answers), 60, "192.0.2.2"))  # type: ignore[arg-type]
        answers += [DnsAnswer("a.example", 1, 60, f"192.0.2.{i}") for i in range(3, 40)]
        cache.observe("agent", DnsMessage(1, True, 0, "a.example", 1, 1, answers, False, 10))
        states.append(_state(cache))
    assert states[0] == states[1]
