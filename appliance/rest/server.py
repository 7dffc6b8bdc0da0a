"""HttpServer: a WSGI app served by cheroot on its own thread, optionally over TLS."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from cheroot import wsgi
from cheroot.ssl.builtin import BuiltinSSLAdapter

log = logging.getLogger(__name__)


# Largest request line plus headers cheroot will read; the default (0) means unbounded, which lets
# any client that can reach the port fill memory before authentication is even looked at.
MAX_HEADER_BYTES = 64 * 1024


class LazyHandshakeSSLAdapter(BuiltinSSLAdapter):
    """TLS whose handshake happens in the worker thread, on the first read.

    cheroot's builtin adapter shakes hands inside its single accept loop, so one client that
    connects and says nothing stalls every other connection for the handshake timeout
    (cherrypy/cheroot#748). OpenSSL performs a pending server handshake inside SSL_read, so
    deferring it costs nothing but moves the wait to the one connection that causes it.
    """

    def wrap(self, sock):  # type: ignore[no-untyped-def]
        return self.context.wrap_socket(sock, do_handshake_on_connect=False, server_side=True), self.get_environ(sock)

    def get_environ(self, sock):  # type: ignore[no-untyped-def]
        # Cipher and certificate details are not known before the handshake, and no route uses them.
        return {"wsgi.url_scheme": "https", "HTTPS": "on"}


class _WaitForDataServer(wsgi.Server):
    """A cheroot server that hands a new connection to a worker only once it has sent something.

    cheroot gives every freshly accepted connection straight to a worker thread, so a client that
    connects and stays silent holds a thread for the whole read timeout; a handful of them starve
    the API. Here a new connection waits in the selector first, like a kept-alive one, and costs
    no thread until it speaks (and is closed by the selector's expiry if it never does).
    """

    def process_conn(self, conn):  # type: ignore[no-untyped-def]
        if not getattr(conn, "_sensor_spoke", False):
            conn._sensor_spoke = True
            self._connections.put(conn)
            return
        super().process_conn(conn)


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
        max_body_bytes: int = 0,
    ) -> None:
        self._server = _WaitForDataServer((host, port), app, numthreads=threads, server_name=name, request_queue_size=128)
        self._server.shutdown_timeout = 2
        self._server.max_request_header_size = MAX_HEADER_BYTES
        if max_body_bytes:
            self._server.max_request_body_size = max_body_bytes
        if cert_file is not None and key_file is not None:
            self._server.ssl_adapter = LazyHandshakeSSLAdapter(str(cert_file), str(key_file))
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
