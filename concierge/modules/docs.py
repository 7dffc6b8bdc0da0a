"""/openapi: the generated OpenAPI 3.1 document and Swagger UI served from local assets (no CDN).

Development: open to everyone. Production: only when OPENAPI_ENABLED=true, and only for admins/owners.
"""

from __future__ import annotations

import json
import mimetypes
from pathlib import Path
from typing import Any, Callable

import bottle

from concierge.errors import AuthenticationRequired, Forbidden, NotFound
from concierge.sessions import SessionService

ASSETS = ("swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png")

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Concierge API</title>
<link rel="stylesheet" href="/openapi/assets/swagger-ui.css"></head>
<body><div id="docs"></div>
<script src="/openapi/assets/swagger-ui-bundle.js"></script>
<script src="/openapi/assets/init.js"></script>
</body></html>
"""

INIT_JS = """window.ui = SwaggerUIBundle({url: '/openapi/openapi.json', dom_id: '#docs', withCredentials: true,
  requestInterceptor: function (req) {
    var m = document.cookie.match(/(?:^|; )concierge_csrf=([^;]*)/);
    if (m) { req.headers['X-CSRF-Token'] = decodeURIComponent(m[1]); }
    return req;
  }});
"""


def swagger_dir() -> Path:
    import swagger_ui_bundle

    return Path(swagger_ui_bundle.swagger_ui_path)


def mount(app: bottle.Bottle, document: Callable[[], dict[str, Any]], sessions: SessionService, production: bool, enabled: bool) -> None:
    """Add the documentation routes to the app."""
    assets = swagger_dir()

    def gate() -> None:
        if not production:
            return
        if not enabled:
            raise NotFound()
        auth = sessions.authenticate(bottle.request)
        if auth is None:
            raise AuthenticationRequired()
        if sessions.resolve_role(auth) not in ("admin", "owner"):
            raise Forbidden("Admin role required")

    @app.get("/openapi")
    def page() -> str:
        gate()
        bottle.response.content_type = "text/html; charset=utf-8"
        return PAGE

    @app.get("/openapi/openapi.json")
    def spec() -> str:
        gate()
        bottle.response.content_type = "application/json"
        return json.dumps(document())

    @app.get("/openapi/assets/<name>")
    def asset(name: str) -> Any:
        gate()
        if name == "init.js":
            bottle.response.content_type = "application/javascript"
            return INIT_JS
        if name not in ASSETS:
            raise NotFound()
        bottle.response.content_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
        bottle.response.set_header("Cache-Control", "public, max-age=86400")
        return (assets / name).read_bytes()
