"""The bench's appliance (bench/pipeline_bench.py's settings) fed flows one by one, for tests that compare what the
whole pipeline raises with one part swapped for its reference."""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from appliance.model import FlowRecord


def pipeline_detections(flows: list[FlowRecord], prepare: Callable[[Any], None] | None = None,
                        after: Callable[[Any], None] | None = None) -> list[Any]:
    """The detections (ids blanked) the pipeline raises on `flows`, their DNS answers learnt first; `prepare(app)` runs
    before the first flow, `after(app)` after the last, before the database closes."""
    from appliance.app import build
    from bench.pipeline_bench import settings

    with tempfile.TemporaryDirectory() as tmp:
        app = build(settings(Path(tmp)))
        assert app.detection is not None and app.pipeline is not None
        if prepare is not None:
            prepare(app)
        for flow in flows:
            for message in flow.dns:
                if message.is_response:
                    app.detection.resolver.observe(flow.agent_id, message)
        found = []
        for flow in flows:
            found += [dataclasses.replace(d, id="") for d in app.pipeline.process(flow)]
        if after is not None:
            after(app)
        app.detection.db.close()
    return found
