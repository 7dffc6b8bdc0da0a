"""Detection ids (detections.DetectionIds): unique within a process, across processes and forked children, in
the text shape of a version-4 UUID, and a new prefix once a prefix's counter is spent."""

from __future__ import annotations

import os
import uuid

from appliance.detection import detections
from appliance.detection.detections import DetectionIds, make_detection, new_detection_id
from appliance.model import Category, Severity


def test_ids_are_unique_and_shaped_like_version_4_uuids():
    ids = [new_detection_id() for _ in range(20_000)]
    assert len(set(ids)) == len(ids)
    for text in ids[:50] + ids[-50:]:
        parsed = uuid.UUID(text)
        assert str(parsed) == text and parsed.version == 4 and parsed.variant == uuid.RFC_4122


def test_two_sources_and_a_forked_child_draw_different_prefixes():
    a, b = DetectionIds(), DetectionIds()
    assert a.next()[:24] != b.next()[:24]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the module's source drew again after the fork
        os.write(write, new_detection_id().encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert child[:24] != new_detection_id()[:24] and len(child) == 36


def test_a_spent_counter_draws_a_new_prefix(monkeypatch):
    monkeypatch.setattr(detections, "_COUNTER_LIMIT", 3)
    source = DetectionIds()
    ids = [source.next() for _ in range(7)]
    assert len(set(ids)) == 7
    assert [i[24:] for i in ids] == ["000000000000", "000000000001", "000000000002"] * 2 + ["000000000000"]
    assert len({i[:24] for i in ids}) == 3


def test_make_detection_gives_each_detection_its_own_id():
    made = [make_detection("dpi.test", Category.RAW_IP_TLS, 0.5, Severity.LOW, agent_id="a", indicator="192.0.2.1",
                           protocol="tls", transport="tcp", evidence={}, flow_ids=["f"], first_ns=1, last_ns=2)
            for _ in range(3)]
    assert len({d.id for d in made}) == 3 and all(uuid.UUID(d.id).version == 4 for d in made)
