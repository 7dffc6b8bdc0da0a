"""/health: liveness for load balancers and the bench's bare-endpoint baseline (no session, no SQL)."""

from __future__ import annotations

from typing import Literal

from concierge.api import Access, Call, Endpoint, OutSchema


class HealthOut(OutSchema):
    status: Literal["ok"]


def routes() -> list:
    """(Endpoint, handler) pairs mounted under /health."""

    def health(call: Call) -> HealthOut:
        return HealthOut(status="ok")

    return [(Endpoint("GET", "", "Liveness: answers while the server accepts requests", Access.PUBLIC, response=HealthOut), health)]
