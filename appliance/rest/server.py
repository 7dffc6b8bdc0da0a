"""HttpServer: a WSGI app served by cheroot on its own thread, optionally over TLS."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from cheroot import wsgi
from cheroot.ssl.builtin import BuiltinSSLAdapter

log = logging.getLogger(__name__)


class HttpServer:
    """Serves `app` on host:port (port 0 picks a free one; `port` tells which after start)."""

    def __init__(
        self,
        app: object,
        host: str,
        port: int,
        *,
        threads: int = 16,
        cert_file: Path | None = None,
        key_file: Path | None = None,
        name: str = "http",
    ) -> None:
        self._server = wsgi.Server((host, port), app, numthreads=threads, server_name=name, request_queue_size=128)
        self._server.shutdown_timeout = 2
        if cert_file is not None and key_file is not None:
            self._server.ssl_adapter = BuiltinSSLAdapter(str(cert_file), str(key_file))
        self.tls = cert_file is not None
        self._thread: threading.Thread | None = None
        self.name = name

    @property
    def port(self) -> int:
        return int(self._server.bind_addr[1])

    def start(self) -> None:
        self._server.prepare()
        self._thread = threading.Thread(target=self._server.serve, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.stop()
        if self._thread is not None:
            self._thread.join(timeout=5)
