"""StreamHub over the real back ends: every event newer than the connection is sent once, in id order,
even when pub/sub does not deliver one (caught up from the replay buffer)."""

from __future__ import annotations

import json
import time
from typing import Iterator

import redis

from concierge.pubsub import PubSub, RedisPubSub
from concierge.streams import StreamHub


def frames(stream: Iterator[bytes], count: int) -> list[tuple[int | None, str]]:
    """The next `count` event frames as (id, event name), skipping heartbeats (for 5 s at most)."""
    out: list[tuple[int | None, str]] = []
    deadline = time.monotonic() + 5
    while len(out) < count:
        assert time.monotonic() < deadline, f"only {out} within 5 s"
        frame = next(stream).decode()
        if frame.startswith(":"):
            continue
        fields = dict(line.split(": ", 1) for line in frame.strip().split("\n"))
        out.append((int(fields["id"]) if "id" in fields else None, fields["event"]))
    return out


def open_stream(hub: StreamHub, channel: str, last_event_id: int | None = None) -> Iterator[bytes]:
    hub.acquire("u1")
    stream = hub.stream("u1", channel, last_event_id)
    assert frames(stream, 1) == [(None, "ready")]
    return stream


def lose_a_publish(url: str, channel: str, payload: dict) -> int:
    """What a publish nobody received leaves in Redis (the listener was reconnecting): the id counted and
    the envelope in the replay buffer, the PUBLISH itself gone."""
    client = redis.Redis.from_url(url)
    event_id = int(client.incr(f"{RedisPubSub.PREFIX}seq:{channel}"))
    client.lpush(f"{RedisPubSub.PREFIX}recent:{channel}", json.dumps({"id": event_id, "data": json.dumps(payload)}))
    client.close()
    return event_id


def test_a_new_stream_sends_what_is_published_after_it_opened_and_nothing_before(pubsub: PubSub) -> None:
    pubsub.publish("g", {"n": 0})
    hub = StreamHub(pubsub, heartbeat=0.2, max_per_user=2, max_total=4)
    stream = open_stream(hub, "g")
    ids = [pubsub.publish("g", {"n": n}) for n in (1, 2)]
    assert frames(stream, 2) == [(ids[0], "status"), (ids[1], "status")]
    assert hub.events_caught_up == 0
    stream.close()
    assert hub.open_streams == 0


def test_a_last_event_id_past_the_newest_resumes_from_now(pubsub: PubSub) -> None:
    """The channel's counter started again (a new Redis): the client's old id must not hide new events."""
    hub = StreamHub(pubsub, heartbeat=0.2, max_per_user=2, max_total=4)
    stream = open_stream(hub, "g", last_event_id=500)
    event_id = pubsub.publish("g", {"n": 1})
    assert frames(stream, 1) == [(event_id, "status")]
    stream.close()


def test_an_event_pubsub_lost_is_sent_at_the_next_heartbeat(redis_url: str) -> None:
    pubsub = RedisPubSub(redis_url, replay_size=10)
    hub = StreamHub(pubsub, heartbeat=0.2, max_per_user=2, max_total=4)
    try:
        stream = open_stream(hub, "g")
        first = pubsub.publish("g", {"status": "booked"})
        assert frames(stream, 1) == [(first, "status")]  # the stream waits on its subscription now
        lost = lose_a_publish(redis_url, "g", {"status": "arrived"})
        assert frames(stream, 1) == [(lost, "status")]
        assert hub.events_caught_up == 1
        stream.close()
    finally:
        pubsub.close()


def test_a_live_event_after_a_lost_one_comes_after_it(redis_url: str) -> None:
    pubsub = RedisPubSub(redis_url, replay_size=10)
    hub = StreamHub(pubsub, heartbeat=30, max_per_user=2, max_total=4)  # no heartbeat: the live event finds the gap
    try:
        stream = open_stream(hub, "g")
        first = pubsub.publish("g", {"status": "booked"})
        assert frames(stream, 1) == [(first, "status")]  # the stream waits on its subscription now
        lost = lose_a_publish(redis_url, "g", {"status": "arrived"})
        live = pubsub.publish("g", {"status": "checked_out"})
        assert frames(stream, 2) == [(lost, "status"), (live, "status")]
        assert hub.events_caught_up == 1
        stream.close()
    finally:
        pubsub.close()
