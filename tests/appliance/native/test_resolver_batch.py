"""ResolverCache.observe_batch (appliance/native/resolver_batch.h): a DnsBatch's answers into the resolver cache
read in place, held to observe_many over record_codec.decode_dns (the objects' path, which reads as upb does).

Equal state after every batch (the per-agent maps, their order, every Resolution, responses_seen), on random
answers and on hostile bytes: whatever the in-place reader takes it must read exactly as upb would, and whatever
it is not sure of it must leave alone (False, nothing observed) for the objects' path.
"""

from __future__ import annotations

import random

import pytest

from appliance.detection import resolutions
from appliance.detection.resolutions import ResolverCache
from appliance.flows import record_codec
from appliance.model import DnsAnswer, DnsMessage
from appliance.native.dpi import resolver_observe_batch

AGENTS = ["office-1", "office-2", "victim"]
NAMES = ["example.com", "cdn.example.net", "a.b.c.example.org", "x" * 60 + ".test", "mail.example.com"]


def _message(rng: random.Random, ts: int) -> DnsMessage:
    answers = []
    for _ in range(rng.choice([0, 1, 1, 1, 2, 3, 20])):
        rtype = rng.choice([1, 1, 28, 5, 5, 16, 15])
        data = (f"10.0.{rng.randint(0, 3)}.{rng.randint(1, 4)}" if rtype == 1 else "2001:db8::" + str(rng.randint(1, 3))
                if rtype == 28 else rng.choice(NAMES + [""]))
        answers.append(DnsAnswer(rng.choice(NAMES), rtype, rng.choice([0, 30, 300, 2**32 - 1]), data))
    return DnsMessage(rng.randint(0, 65535), rng.random() < 0.9, rng.choice([0, 0, 3]), rng.choice(NAMES + [""]),
                      1, 1, answers, rng.random() < 0.05, ts)


def _batches(seed: int, count: int = 40) -> list[bytes]:
    rng = random.Random(seed)
    ts = 1_700_000_000_000_000_000
    out = []
    for _ in range(count):
        items = []
        for _ in range(rng.randint(0, 60)):
            ts += rng.choice([0, 1, 10**6, 2 * 10**9, 10**11])
            items.append((rng.choice(AGENTS), _message(rng, ts), False))
        out.append(record_codec.encode_dns(items))
    return out


def _state(cache: ResolverCache) -> tuple[object, ...]:
    return ([(agent, list(d.items())) for agent, d in cache._by_ip.items()],
            [(agent, list(d.items())) for agent, d in cache._by_name.items()], cache.responses_seen)


def _by_objects(cache: ResolverCache, data: bytes) -> None:
    cache.observe_many(record_codec.decode_dns(data))


@pytest.mark.parametrize("seed", range(6))
def test_batches_read_in_place_leave_the_cache_as_the_objects_path_does(seed: int) -> None:
    fast, slow = ResolverCache(max_per_agent=40), ResolverCache(max_per_agent=40)  # small: the bound is exercised
    for data in _batches(seed):
        assert fast.observe_batch(data) is True
        _by_objects(slow, data)
        assert _state(fast) == _state(slow)
    assert fast.responses_seen > 0


def _field(number: int, wire: int, payload: bytes) -> bytes:
    tag = bytes([(number << 3) | wire]) if number < 16 else bytes([((number << 3) | wire) & 0x7F | 0x80, number >> 4])
    return tag + (bytes([len(payload)]) + payload if wire == 2 else payload)


def _item(agent: bytes = b"a", message: bytes = b"", from_event: bool = False, extra: bytes = b"") -> bytes:
    body = _field(1, 2, agent) + _field(2, 2, message) + (_field(3, 0, b"\x01") if from_event else b"") + extra
    return _field(1, 2, body)


ANSWER = _field(2, 0, b"\x01") + _field(3, 0, b"\x1e") + _field(4, 2, b"10.0.0.1")
RESPONSE = _field(2, 0, b"\x01") + _field(4, 2, b"example.com") + _field(7, 2, ANSWER) + _field(9, 0, b"\x05")


def test_a_plain_hand_made_batch_is_learned() -> None:
    cache = ResolverCache()
    assert cache.observe_batch(_item(message=RESPONSE)) is True
    assert cache.responses_seen == 1 and cache.lookup("a", "10.0.0.1", 5, 60.0).name == "example.com"


@pytest.mark.parametrize("data", [
    _item(message=RESPONSE, from_event=True),  # a resolver event: the DNS layers must see it, in order
    _item(message=RESPONSE.replace(b"example.com", b"exampl\xc3\xa9.com")),  # not ASCII
    _field(1, 2, _field(1, 2, b"a") + _field(2, 2, RESPONSE) + _field(2, 2, RESPONSE)),  # a message twice: upb merges
    _item(message=RESPONSE + _field(9, 2, b"xx")),  # a known field in another wire type
    _item(message=RESPONSE)[:-3],  # truncated
    _item(message=RESPONSE) + b"\x0b",  # a group's wire type
    _item(message=RESPONSE) + b"\x00\x00",  # field number 0
    _item(message=_field(9, 0, b"\xff" * 9 + b"\x7f") + RESPONSE),  # a varint over 64 bits
    _item(message=RESPONSE, extra=_field(3, 0, b"\x02")),  # from_event given as 2
])
def test_what_is_not_plain_is_left_to_the_objects_path_and_changes_nothing(data: bytes) -> None:
    cache = ResolverCache()
    before = _state(cache)
    assert cache.observe_batch(_item(message=RESPONSE) + data) is False
    assert _state(cache) == before


def test_unknown_fields_are_skipped_as_upb_skips_them() -> None:
    odd = _item(message=RESPONSE + _field(12, 0, b"\x07") + _field(13, 2, b"zz") + _field(14, 5, b"abcd")
                + _field(15, 1, b"abcdefgh"), extra=_field(9, 2, b"q"))
    fast, slow = ResolverCache(), ResolverCache()
    assert fast.observe_batch(odd) is True
    _by_objects(slow, odd)
    assert _state(fast) == _state(slow) and fast.responses_seen == 1


def test_hostile_mutations_are_read_exactly_as_upb_reads_them_or_left_alone() -> None:
    rng = random.Random(7)
    seeds = _batches(11, count=8)
    taken = 0
    for _ in range(3000):
        data = bytearray(rng.choice(seeds))
        if not data:
            continue
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(data))
            choice = rng.random()
            if choice < 0.6:
                data[at] = rng.randrange(256)
            elif choice < 0.8:
                del data[at : at + rng.randint(1, 8)]
            else:
                data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
        fast, slow = ResolverCache(), ResolverCache()
        if not fast.observe_batch(bytes(data)):
            assert _state(fast) == _state(ResolverCache())
            continue
        taken += 1
        _by_objects(slow, bytes(data))  # it took them: upb must read them, the same
        assert _state(fast) == _state(slow)
    assert taken > 100


def test_arguments_are_checked() -> None:
    maker = resolutions._RESOLUTION_MAKER
    with pytest.raises(TypeError):
        resolver_observe_batch(b"", {}, {}, 10, object(), None)  # not the Resolution maker
    with pytest.raises(TypeError):
        resolver_observe_batch("not bytes", {}, {}, 10, maker, None)
    with pytest.raises(TypeError):
        resolver_observe_batch(b"", [], {}, 10, maker, None)
    with pytest.raises(TypeError):
        resolver_observe_batch(b"", {}, {}, 10, maker)  # five arguments
    assert resolver_observe_batch(b"", {}, {}, 10, maker, None) == 0  # an empty batch is plain and teaches nothing
