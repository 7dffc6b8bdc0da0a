"""The dashboard's composition root: `build(settings)` wires accounts, sessions, the proxy and the web app."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from appliance.app import load_admin_token
from appliance.config import Settings, split_listen
from appliance.dashboard.accounts import UserStore
from appliance.dashboard.proxy import ApplianceClient
from appliance.dashboard.ratelimit import SignInLimiter
from appliance.dashboard.sessions import SessionStore
from appliance.dashboard.web import DashboardWeb
from appliance.errors import ConfigError
from appliance.pki import CA_CERT, SERVER_CERT, SERVER_KEY
from appliance.rest.server import HttpServer

log = logging.getLogger(__name__)

USERS_DB = "console.sqlite3"


class CertificatesMissing(ConfigError):
    """The appliance has not created its certificates yet (it has never run with these paths)."""


def default_api_url(settings: Settings) -> str:
    _, port = split_listen(settings.rest.listen)
    return f"{'https' if settings.rest.tls else 'http'}://127.0.0.1:{port}"


@dataclass
class Dashboard:
    """The running console server. `start()` opens the port; `stop()` closes it and the account store."""

    settings: Settings
    web: DashboardWeb
    users: UserStore
    upstream: ApplianceClient
    cert_file: Path
    key_file: Path
    first_admin_password: str | None = None
    port: int = 0
    _server: HttpServer | None = field(default=None, repr=False)

    def start(self) -> None:
        host, port = split_listen(self.settings.dashboard.listen)
        self._server = HttpServer(self.web.app, host, port, threads=self.settings.dashboard.threads,
                                  cert_file=self.cert_file, key_file=self.key_file, name="dashboard",
                                  max_body_bytes=self.web.max_body_bytes + 64 * 1024)
        self._server.start()
        self.port = self._server.port
        log.info("dashboard listening %s:%d api=%s", host, self.port, self.upstream.base_url)

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
        self.upstream.close()
        self.users.close()
        if self.web.counters.by_reason:
            log.info("dashboard refusals %s", self.web.counters.by_reason)


def build(settings: Settings) -> Dashboard:
    """Wire the dashboard (the appliance must have created its certificates: it runs first)."""
    paths, board = settings.paths, settings.dashboard
    certs = paths.certs_dir
    cert_file, key_file, ca_file = certs / SERVER_CERT, certs / SERVER_KEY, certs / CA_CERT
    for needed in (cert_file, key_file, ca_file):
        if not needed.is_file():
            raise CertificatesMissing(f"{needed}: missing; start the appliance once first (it creates its certificates)")
    admin_token, _ = load_admin_token(paths.state_dir)
    users = UserStore(paths.state_dir / USERS_DB)
    first_password = users.ensure_first_admin(paths.state_dir)
    api_url = board.api_url or default_api_url(settings)
    upstream = ApplianceClient(api_url, admin_token, str(ca_file) if api_url.startswith("https") else None,
                               pool_size=board.threads)
    sessions = SessionStore(board.session_idle_minutes * 60, board.session_max_hours * 3600)
    web = DashboardWeb(users, sessions, SignInLimiter(), upstream, board.dist_dir, settings.rest.max_body_bytes)
    return Dashboard(settings=settings, web=web, users=users, upstream=upstream, cert_file=cert_file,
                     key_file=key_file, first_admin_password=first_password)
