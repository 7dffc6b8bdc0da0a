"""The pub/sub contract, for both back ends: JSON payloads in order, increasing ids, recent events for resume."""

from __future__ import annotations

from concierge.pubsub import PubSub


def test_subscribers_receive_json_payloads_in_order_with_increasing_ids(pubsub: PubSub) -> None:
    sub = pubsub.subscribe("guest:u1:status")
    other = pubsub.subscribe("guest:u2:status")
    ids = [pubsub.publish("guest:u1:status", {"status": s, "n": n}) for n, s in enumerate(["arrived", "checked_out"])]
    assert ids == sorted(ids) and ids[0] >= 1
    first, second = sub.get(timeout=5), sub.get(timeout=5)
    assert first is not None and second is not None
    assert (first.id, first.payload()) == (ids[0], {"status": "arrived", "n": 0})
    assert (second.id, second.data) == (ids[1], '{"status":"checked_out","n":1}')
    assert other.get(timeout=0.2) is None  # other channels see nothing
    sub.close()
    other.close()


def test_iterating_a_subscription_yields_payloads(pubsub: PubSub) -> None:
    sub = pubsub.subscribe("ch")
    pubsub.publish("ch", {"a": 1})
    assert next(iter(sub)) == {"a": 1}
    sub.close()


def test_recent_keeps_the_last_events_for_resume(pubsub: PubSub) -> None:
    ids = [pubsub.publish("replay", {"n": n}) for n in range(5)]
    recent = pubsub.recent("replay", after=ids[2])
    assert [e.id for e in recent] == ids[3:]
    assert [e.payload()["n"] for e in pubsub.recent("replay", after=0)] == [2, 3, 4]  # replay buffer of 3


def test_closed_subscription_stops_receiving(pubsub: PubSub) -> None:
    sub = pubsub.subscribe("gone")
    sub.close()
    pubsub.publish("gone", {"x": 1})
    assert sub.get(timeout=0.2) is None


def test_latest_is_the_newest_id_of_the_channel(pubsub: PubSub) -> None:
    assert pubsub.latest("fresh") == 0
    ids = [pubsub.publish("fresh", {"n": n}) for n in range(4)]
    assert pubsub.latest("fresh") == ids[-1] == 4  # ids are per channel and consecutive
    assert pubsub.latest("other") == 0
