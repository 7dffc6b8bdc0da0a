"""HttpServer: a WSGI app behind an asyncio HTTP/1.1 front (h11), optionally over TLS.

A worker thread is the scarce resource of a WSGI server, so no connection gets one until it holds
a whole request. One event-loop thread accepts, shakes hands, and reads each request head and
body under deadlines (`ConnectionLimits`); only a complete request goes to the worker pool, and
the reply is written back by the loop, so a client that sends or reads slowly costs a socket and
a few kilobytes, never a thread. Connections are capped per source address and in total.
Everything refused or cut short is counted in `HttpServer.counters` (shown under `rest` in the
metrics).
"""

from __future__ import annotations

import asyncio
import io
import logging
import socket
import ssl
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote_to_bytes

import h11

log = logging.getLogger(__name__)

# Largest request line plus headers; the default of h11 (16 KiB) is kept in spirit, a little wider.
MAX_HEADER_BYTES = 64 * 1024
_READ_SIZE = 64 * 1024
# A body up to this size stays in memory; larger (artifact uploads) is spooled to a temporary file.
_SPOOL_IN_MEMORY = 1024 * 1024

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


@dataclass(frozen=True)
class ConnectionLimits:
    """Deadlines and caps of the front; the README's "Security limits" lists them with their keys."""

    head_timeout: float = 10.0  # TLS handshake plus request line and headers
    body_timeout: float = 30.0  # the body, plus `body_bytes / min_body_rate` seconds for large ones
    min_body_rate: int = 64 * 1024  # bytes per second a large upload must average
    keepalive_timeout: float = 15.0  # idle time between requests on one connection
    write_timeout: float = 30.0  # a reply chunk the client does not take within this is the end
    max_per_source: int = 64  # open connections per client address
    max_connections: int = 1024  # open connections in total


class _Refused(Exception):
    """A request ends here with `status` (the reason is counted under `reason`)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


def _rest_error_body(status: int, reason: str, message: str) -> str:
    from appliance.rest.api import error_body  # the one error shape of the REST layer

    return error_body(status, message)


class HttpServer:
    """Serves `app` on host:port (port 0 picks a free one; `port` tells which after start)."""

    def __init__(
        self,
        app: WsgiApp,
        host: str,
        port: int,
        *,
        threads: int = 16,
        cert_file: Path | None = None,
        key_file: Path | None = None,
        name: str = "http",
        max_body_bytes: int = 0,
        body_limit: Callable[[str, str], int] | None = None,
        limits: ConnectionLimits = ConnectionLimits(),
        error_body: Callable[[int, str, str], str] | None = None,
    ) -> None:
        self._app = app
        # The front answers some requests itself (408, 413, 431...): in the error shape of the app it serves.
        self._error_body = error_body or _rest_error_body
        self._limits = limits
        # Largest body per (method, path): refused with 413 on its Content-Length, before it is read.
        everywhere = max_body_bytes or 1 << 62
        self._body_limit = body_limit or (lambda method, path: everywhere)
        self._ssl: ssl.SSLContext | None = None
        if cert_file is not None and key_file is not None:
            self._ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self._ssl.load_cert_chain(str(cert_file), str(key_file))
        self.tls = self._ssl is not None
        self.name = name
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.create_server((host, port), family=family, backlog=LISTEN_BACKLOG, reuse_port=False)
        self._sock.setblocking(False)
        self._workers = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=f"{name}-worker")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._per_source: Counter[str] = Counter()
        self._open = 0
        self.counters: Counter[str] = Counter()

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    def stats(self) -> dict[str, Any]:
        """Open connections and what was refused or cut short, by reason (for the metrics)."""
        return {"open_connections": self._open, **dict(self.counters)}

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
        self._thread.start()
        self._ready.wait(10)

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        loop.set_exception_handler(_quiet_exception_handler)
        # The backlog again: asyncio listens anew when it starts serving, with its own default (100) unless told.
        server = loop.run_until_complete(asyncio.start_server(self._connection, sock=self._sock, limit=_READ_SIZE,
                                                              backlog=LISTEN_BACKLOG))
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            server.close()
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            loop.run_until_complete(_settle(tasks))
            loop.close()

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
        self._workers.shutdown(wait=False, cancel_futures=True)
        self._sock.close()

    # -- one connection ------------------------------------------------------------------------
    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername") or ("", 0)
        source = str(peer[0])
        if self._open >= self._limits.max_connections:
            self.counters["refused_total_cap"] += 1
            writer.transport.abort()
            return
        if self._per_source[source] >= self._limits.max_per_source:
            self.counters["refused_per_source_cap"] += 1
            writer.transport.abort()
            return
        self._open += 1
        self._per_source[source] += 1
        try:
            if self._ssl is not None:
                try:
                    await writer.start_tls(self._ssl, ssl_handshake_timeout=self._limits.head_timeout)
                except (OSError, ssl.SSLError, asyncio.TimeoutError, ConnectionError):
                    self.counters["tls_handshake_failed"] += 1
                    writer.transport.abort()
                    return
            await self._requests(reader, writer, peer)
        except asyncio.CancelledError:
            pass  # the server is stopping: the connection just ends (a cancelled task here logs noise)
        except (ConnectionError, ssl.SSLError, OSError) as err:
            # The client went away mid-request or mid-reply: one line, never a traceback.
            self.counters["client_disconnected"] += 1
            log.info("client %s disconnected early: %s", source, type(err).__name__)
        finally:
            self._open -= 1
            self._per_source[source] -= 1
            if self._per_source[source] <= 0:
                del self._per_source[source]
            writer.close()

    async def _requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: tuple[Any, ...]) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES)
        first = True
        while True:
            # The first request shares the head deadline with the handshake's; later ones may idle first.
            try:
                request = await self._read_head(conn, reader, self._limits.head_timeout if first else self._limits.keepalive_timeout,
                                                first)
                if request is None:
                    return
                body = await self._read_body(conn, reader, writer, request)
            except _Refused as refused:
                self.counters[refused.reason] += 1
                await self._send_error(conn, writer, refused.status, refused.reason, str(refused))
                await _linger(reader)
                return
            first = False
            environ = self._environ(request, body, peer)
            if not await self._respond(conn, writer, environ, request.method == b"HEAD"):
                return
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return
            try:
                conn.start_next_cycle()
            except h11.LocalProtocolError:
                return

    async def _read_head(self, conn: h11.Connection, reader: asyncio.StreamReader, timeout: float,
                         first: bool) -> h11.Request | None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as err:
                status = err.error_status_hint
                raise _Refused(status, "bad_request" if status != 431 else "head_too_large",
                               "Request headers too large" if status == 431 else "Malformed HTTP request") from None
            if isinstance(event, h11.Request):
                return event
            if event is h11.PAUSED or isinstance(event, h11.ConnectionClosed):
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                return await self._head_timed_out(conn, first)
            try:
                data = await asyncio.wait_for(reader.read(_READ_SIZE), left)
            except asyncio.TimeoutError:
                return await self._head_timed_out(conn, first)
            conn.receive_data(data)

    async def _head_timed_out(self, conn: h11.Connection, first: bool) -> None:
        if first or conn.trailing_data[0]:
            raise _Refused(408, "head_timeout", "Request head not received in time")
        return None  # an idle kept-alive connection simply ends

    async def _read_body(self, conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         request: h11.Request) -> io.IOBase:
        limit = self._body_limit(request.method.decode("ascii", "replace"), request.target.partition(b"?")[0].decode("latin-1"))
        declared = _content_length(request)
        if declared is not None and declared > limit:
            raise _Refused(413, "body_too_large", f"Request body too large (limit {limit} bytes)")
        if conn.they_are_waiting_for_100_continue:
            writer.write(conn.send(h11.InformationalResponse(status_code=100, headers=[])))
        body: io.IOBase = tempfile.SpooledTemporaryFile(max_size=_SPOOL_IN_MEMORY)  # type: ignore[assignment]
        received = 0
        started = time.monotonic()
        while True:
            event = conn.next_event()
            if isinstance(event, h11.Data):
                received += len(event.data)
                if received > limit:
                    body.close()
                    raise _Refused(413, "body_too_large", f"Request body too large (limit {limit} bytes)")
                body.write(event.data)
                continue
            if isinstance(event, h11.EndOfMessage):
                body.seek(0)
                return body
            if isinstance(event, h11.ConnectionClosed):
                body.close()
                raise ConnectionResetError("closed before the body was complete")
            # NEED_DATA: wait no longer than the body deadline (which grows with the bytes received).
            left = started + self._limits.body_timeout + received / self._limits.min_body_rate - time.monotonic()
            data = b""
            if left > 0:
                try:
                    data = await asyncio.wait_for(reader.read(_READ_SIZE), left)
                except asyncio.TimeoutError:
                    left = 0
            if left <= 0:
                body.close()
                raise _Refused(408, "body_timeout", "Request body not received in time")
            try:
                conn.receive_data(data)
            except RuntimeError:
                raise ConnectionResetError("closed before the body was complete") from None

    # -- handing the complete request to a worker ------------------------------------------------
    def _environ(self, request: h11.Request, body: io.IOBase, peer: tuple[Any, ...]) -> dict[str, Any]:
        target = request.target
        path, _, query = target.partition(b"?")
        environ: dict[str, Any] = {
            "REQUEST_METHOD": request.method.decode("ascii"),
            "SCRIPT_NAME": "",
            "PATH_INFO": unquote_to_bytes(path).decode("latin-1"),
            "QUERY_STRING": query.decode("latin-1"),
            "SERVER_NAME": "appliance",
            "SERVER_PORT": str(self.port),
            "SERVER_PROTOCOL": "HTTP/" + request.http_version.decode("ascii"),
            "REMOTE_ADDR": str(peer[0]),
            "REMOTE_PORT": str(peer[1]) if len(peer) > 1 else "",
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": "https" if self.tls else "http",
            "wsgi.input": body,
            "wsgi.input_terminated": True,
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
        }
        if self.tls:
            environ["HTTPS"] = "on"
        for raw_name, raw_value in request.headers:
            name = raw_name.decode("latin-1").upper().replace("-", "_")
            value = raw_value.decode("latin-1")
            key = name if name in ("CONTENT_TYPE", "CONTENT_LENGTH") else "HTTP_" + name
            environ[key] = environ[key] + "," + value if key in environ else value
        if "CONTENT_LENGTH" not in environ:
            environ["CONTENT_LENGTH"] = str(_stream_size(body))
        return environ

    async def _respond(self, conn: h11.Connection, writer: asyncio.StreamWriter, environ: dict[str, Any], head: bool) -> bool:
        loop = asyncio.get_running_loop()
        try:
            status, headers, chunks = await loop.run_in_executor(self._workers, _call_app, self._app, environ)
        except Exception:  # the app's own error pages failed: one JSON 500, as the framework would
            log.exception("unhandled error in %s %s", environ["REQUEST_METHOD"], environ["PATH_INFO"][:200])
            environ["wsgi.input"].close()
            await self._send_error(conn, writer, 500, "internal_error", "Internal server error")
            return False
        try:
            await self._write(writer, conn.send(h11.Response(status_code=status, headers=headers)))
            if not head:
                while True:
                    # Each chunk is produced on a worker (files are read there) and written by the loop.
                    chunk = await loop.run_in_executor(self._workers, next, chunks, None)
                    if chunk is None:
                        break
                    if chunk:
                        await self._write(writer, conn.send(h11.Data(data=chunk)))
            await self._write(writer, conn.send(h11.EndOfMessage()))
        except h11.LocalProtocolError as err:  # e.g. a body longer than its Content-Length
            log.error("reply to %s %s broke HTTP framing: %s", environ["REQUEST_METHOD"], environ["PATH_INFO"][:200], err)
            return False
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                await loop.run_in_executor(self._workers, close)
            environ["wsgi.input"].close()
        return True

    async def _write(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(data)
        try:
            await asyncio.wait_for(writer.drain(), self._limits.write_timeout)
        except asyncio.TimeoutError:
            self.counters["write_timeout"] += 1
            raise ConnectionResetError("client did not read the reply in time") from None

    async def _send_error(self, conn: h11.Connection, writer: asyncio.StreamWriter, status: int, reason: str,
                          message: str) -> None:
        if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        body = self._error_body(status, reason, message).encode()
        try:
            data = conn.send(h11.Response(status_code=status, headers=[
                ("Content-Type", "application/json"), ("Content-Length", str(len(body))), ("Connection", "close")]))
            data += conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage())
        except h11.LocalProtocolError:
            return
        writer.write(data)
        try:
            await asyncio.wait_for(writer.drain(), self._limits.write_timeout)
        except (asyncio.TimeoutError, ConnectionError, OSError):
            pass


# Connections the kernel holds for the event loop to accept. When they are more, a new client's SYN is dropped and
# it tries again a second later: a burst of slow clients (tests/appliance/security/test_slow_clients.py) would cost
# everyone else that second while the loop shakes hands.
LISTEN_BACKLOG = 512
LINGER_SECONDS = 1.0  # after a refusal, how long what the client still sends is read and discarded
LINGER_BYTES = 64 << 10


async def _linger(reader: asyncio.StreamReader) -> None:
    """Read and discard what a refused client still sends, briefly, before the connection closes.

    Closing a socket with unread input (or input arriving after the close) makes the kernel answer with
    a reset, which can reach the client before it has read the refusal: a slow client dripping its
    request would see a reset instead of its 408. Apache calls this a lingering close. Bounded in time
    and bytes, so a refused client holds its connection at most LINGER_SECONDS longer.
    """
    deadline = asyncio.get_running_loop().time() + LINGER_SECONDS
    taken = 0
    try:
        while taken < LINGER_BYTES:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return
            chunk = await asyncio.wait_for(reader.read(4096), left)
            if not chunk:
                return
            taken += len(chunk)
    except (asyncio.TimeoutError, ConnectionError, OSError, ssl.SSLError):
        return


def _call_app(app: WsgiApp, environ: dict[str, Any]) -> tuple[int, list[tuple[str, str]], Iterator[bytes]]:
    """Run the WSGI app on a worker; the reply body is iterated later, chunk by chunk."""
    started: list[Any] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], None]:
        started[:] = [int(status.split(" ", 1)[0]), headers]
        return _no_write

    result = app(environ, start_response)
    iterator = iter(result)
    if not started:  # WSGI allows start_response on the first iteration
        first = next(iterator, b"")
        iterator = _prepend(first, iterator, result)
    status, headers = started
    return status, [(k, v) for k, v in headers if k.lower() not in ("connection", "transfer-encoding")], iterator


def _prepend(first: bytes, rest: Iterator[bytes], result: Iterable[bytes]) -> Iterator[bytes]:
    class _Chain:
        def __iter__(self) -> _Chain:
            return self

        def __next__(self) -> bytes:
            nonlocal first
            if first is not None:
                chunk, first = first, None  # type: ignore[assignment]
                return chunk
            return next(rest)

        def close(self) -> None:
            getattr(result, "close", lambda: None)()

    return _Chain()


def _no_write(data: bytes) -> None:
    raise RuntimeError("the WSGI write() callable is not supported")


def _content_length(request: h11.Request) -> int | None:
    for name, value in request.headers:
        if name == b"content-length":
            return int(value)
    return None


def _stream_size(body: io.IOBase) -> int:
    position = body.tell()
    size = body.seek(0, io.SEEK_END)
    body.seek(position)
    return size


async def _settle(tasks: set[asyncio.Task[Any]]) -> None:
    await asyncio.gather(*tasks, return_exceptions=True)


def _quiet_exception_handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """Resets and broken TLS from clients are routine on a public port: one line, no traceback."""
    exc = context.get("exception")
    if isinstance(exc, (ConnectionError, ssl.SSLError, OSError)):
        log.info("connection error: %s", type(exc).__name__)
        return
    loop.default_exception_handler(context)
