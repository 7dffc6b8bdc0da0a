"""What each console role may do through the proxy: a table a reader can scan."""

from __future__ import annotations

import re

# (method, path pattern) pairs an analyst may call; an admin may call everything under /api/v1.
ANALYST_ALLOWED: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("GET", re.compile(r"^/api/v1/(?!agent/tokens(/|$)).*$")),
    ("POST", re.compile(r"^/api/v1/alerts/[^/]+/status$")),
    ("POST", re.compile(r"^/api/v1/alerts/bulk$")),
    ("POST", re.compile(r"^/api/v1/whitelist$")),
    ("DELETE", re.compile(r"^/api/v1/whitelist/[^/]+$")),
)


def allowed(role: str, method: str, path: str) -> bool:
    if role == "admin":
        return True
    if role == "analyst":
        method = "GET" if method == "HEAD" else method
        return any(m == method and pattern.match(path) for m, pattern in ANALYST_ALLOWED)
    return False
