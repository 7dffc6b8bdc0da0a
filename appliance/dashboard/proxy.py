"""The upstream: the appliance's REST API over pooled, CA-verified HTTPS, called with the admin token."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import urllib3

log = logging.getLogger(__name__)

# Reply headers worth passing back to the browser (the rest are hop-by-hop or the dashboard's own).
PASSED_HEADERS = ("Content-Type", "Content-Disposition", "Retry-After")


@dataclass(frozen=True)
class UpstreamReply:
    status: int
    body: bytes
    headers: dict[str, str]


class UpstreamUnavailable(Exception):
    """The appliance did not answer (restarting, down, or too slow)."""


class ApplianceClient:
    """Forwards one request; the admin token is added here and nowhere else."""

    def __init__(self, base_url: str, admin_token: str, ca_file: str | None, pool_size: int = 16,
                 timeout_s: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._token = admin_token
        tls: dict[str, Any] = {"cert_reqs": "CERT_REQUIRED", "ca_certs": ca_file} if ca_file else {}
        self._pool = urllib3.PoolManager(num_pools=2, maxsize=pool_size, block=False, retries=False,
                                         timeout=urllib3.Timeout(connect=5.0, read=timeout_s), **tls)
        self.failures = 0

    def forward(self, method: str, path: str, query: str, body: bytes | None, content_type: str | None,
                console_user: str) -> UpstreamReply:
        url = self.base_url + quote(path, safe="/-._~")
        if query:
            url += "?" + query
        headers = {"Authorization": f"Bearer {self._token}", "X-Console-User": console_user, "Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        try:
            reply = self._pool.request(method, url, body=body, headers=headers, redirect=False, preload_content=True)
        except urllib3.exceptions.HTTPError as err:
            self.failures += 1
            log.warning("upstream %s %s failed: %s", method, path, type(err).__name__)
            raise UpstreamUnavailable(str(err)) from None
        passed = {name: reply.headers[name] for name in PASSED_HEADERS if name in reply.headers}
        return UpstreamReply(reply.status, reply.data, passed)

    def close(self) -> None:
        self._pool.clear()
