"""StreamClient: one persistent client stream to the appliance, fed from a bounded queue.

The capture thread only appends to a deque (never blocks on the network). A sender thread drains
it into batches (flushed when full or after `flush_interval`), keeps one stream open, and when the
appliance goes away reconnects with exponential backoff and jitter. While it is away the queue
keeps the newest `queue_size` items: the oldest are dropped and counted, and the count is reported
on the next stream (metadata `x-agent-dropped`, and a log line). Delivery is at most once: items
handed to a stream that then breaks are lost with it.

Every failure is classified (`StreamFailure`): a permanent refusal (the appliance said no to this
certificate or this agent) is logged at ERROR with what to do and retried only every
`refused_backoff` seconds; a one-shot client (`fail_fast`, the replay of a capture file) stops at
the first failure, so its caller can exit non-zero with the same sentence.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import grpc

from agents import wire
from agents.config import Identity

log = logging.getLogger(__name__)

T = TypeVar("T")

_KEEPALIVE: list[tuple[str, int | str]] = [
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.max_send_message_length", 4 * 1024 * 1024),
]


@dataclass(frozen=True, slots=True)
class Connection:
    """How to reach the appliance: address and mTLS material (PEM bytes)."""

    target: str
    ca_pem: bytes = b""
    cert_pem: bytes = b""
    key_pem: bytes = b""
    server_name: str = ""
    insecure: bool = False
    connect_timeout: float = 5.0

    def channel(self) -> grpc.Channel:
        options: list[tuple[str, int | str]] = list(_KEEPALIVE)
        if self.insecure:
            return grpc.insecure_channel(self.target, options=options)
        if self.server_name:
            options.append(("grpc.ssl_target_name_override", self.server_name))
        creds = grpc.ssl_channel_credentials(self.ca_pem or None, self.key_pem or None, self.cert_pem or None)
        return grpc.secure_channel(self.target, creds, options=options)


@dataclass(frozen=True, slots=True)
class StreamFailure:
    """Why a stream did not deliver: the gRPC status (or UNREACHABLE), the appliance's words, what to do."""

    code: str
    detail: str
    permanent: bool
    advice: str

    def sentence(self, target: str) -> str:
        detail = f": {self.detail}" if self.detail else ""
        return f"the appliance at {target} answered {self.code}{detail}. {self.advice}"


_REENROLL = ("Re-run enrollment on this machine (create a token with POST /api/v1/agent/tokens and paste "
             "the command it returns); that issues a certificate bound to this machine.")
# gRPC status -> (permanent, what the admin does). A permanent refusal will not heal by retrying.
_FAILURES: dict[grpc.StatusCode, tuple[bool, str]] = {
    grpc.StatusCode.PERMISSION_DENIED: (True, "The appliance refuses this agent's certificate (revoked, or bound "
                                              "to another machine). " + _REENROLL),
    grpc.StatusCode.UNAUTHENTICATED: (True, "The appliance does not accept this agent's identity. " + _REENROLL),
    grpc.StatusCode.UNIMPLEMENTED: (True, "The appliance does not know this stream: install an agent built for "
                                          "its version (from its /static payload)."),
    grpc.StatusCode.INVALID_ARGUMENT: (True, "The appliance rejected what the agent sent: install an agent built "
                                             "for its version (from its /static payload)."),
    grpc.StatusCode.FAILED_PRECONDITION: (True, "The appliance is not ready for this agent; see its log."),
    grpc.StatusCode.RESOURCE_EXHAUSTED: (False, "The appliance is at its limit of concurrent streams "
                                                "(grpc.max_streams): retry later or raise the limit."),
    grpc.StatusCode.UNAVAILABLE: (False, "The appliance went away or the connection broke: check that it runs "
                                         "and that the network lets the gRPC port through."),
}
_OTHER = (False, "The stream broke; see the appliance's log for the reason.")


def classify(err: grpc.RpcError) -> StreamFailure:
    """The failure a gRPC error stands for (status code, the appliance's detail, advice)."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    detail = err.details() if hasattr(err, "details") else str(err)
    permanent, advice = _FAILURES.get(code, _OTHER)
    return StreamFailure(code.name if isinstance(code, grpc.StatusCode) else str(code), detail or "", permanent,
                         advice)


def unreachable(connection: Connection) -> StreamFailure:
    return StreamFailure(
        "UNREACHABLE", f"no connection within {connection.connect_timeout:.0f} s", False,
        "Check the address and port (`target`, gRPC, default 50051), that the appliance runs and that a firewall "
        "lets the port through. A TLS handshake the appliance refuses ends here too (a certificate from another "
        "appliance, or an appliance re-installed with a new CA); if the appliance runs and is reachable: " + _REENROLL)


@dataclass(frozen=True, slots=True)
class StreamTuning:
    """Batching, buffering and retry knobs of one stream."""

    batch_size: int = 256
    flush_interval: float = 0.5
    queue_size: int = 50_000
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    # After a permanent refusal (revoked or rebound certificate) an agent only retries this rarely:
    # it heals once the admin re-enrolls, without flooding the appliance's log meanwhile.
    refused_backoff: float = 300.0


class StreamClient(Generic[T]):
    """Streams items of type T over one RPC of SensorService, surviving the appliance going away."""

    def __init__(
        self,
        name: str,
        connection: Connection,
        identity: Identity,
        rpc: Callable[[wire.Stub], Callable[..., object]],
        encode: Callable[[Sequence[T]], Iterable[object]],
        tuning: StreamTuning,
        *,
        enrich: Callable[[Sequence[T]], None] | None = None,
        jitter: Callable[[], float] = random.random,
        fail_fast: bool = False,
    ) -> None:
        """`fail_fast`: stop at the first failure instead of reconnecting (a one-shot replay, whose
        caller reports `failure` and exits non-zero)."""
        self.name = name
        self._connection = connection
        self._identity = identity
        self._rpc = rpc
        self._encode = encode
        self._tuning = tuning
        self._enrich = enrich
        self._jitter = jitter
        self._fail_fast = fail_fast
        self._queue: deque[T] = deque(maxlen=tuning.queue_size)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._closing = False
        self._generation = 0
        self._thread: threading.Thread | None = None
        # Counters (read by stats and tests; written by one thread each).
        self.submitted = 0
        self.dropped = 0
        self.sent = 0
        self.streams_opened = 0
        self.failures = 0
        self.refusals = 0
        self.last_reply: tuple[int, int, str] | None = None
        # The most recent failure, cleared when a stream ends with the appliance's reply.
        self.failure: StreamFailure | None = None
        self._dropped_reported = 0

    # -- producer side (capture thread) --------------------------------------------------------

    def submit(self, item: T, block: bool = False) -> None:
        """Queue one item. Live capture never blocks (the oldest item is dropped when full);
        replay of a file passes block=True to wait for room instead."""
        queue = self._queue
        if len(queue) >= self._tuning.queue_size:
            if block:
                while len(queue) >= self._tuning.queue_size and not self._stop.is_set():
                    self._wake.set()
                    time.sleep(0.002)
            else:
                self.dropped += 1
        queue.append(item)
        self.submitted += 1
        if len(queue) >= self._tuning.batch_size:
            self._wake.set()

    @property
    def queued(self) -> int:
        return len(self._queue)

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> StreamClient[T]:
        self._thread = threading.Thread(target=self._run, name=f"stream-{self.name}", daemon=True)
        self._thread.start()
        return self

    def close(self, timeout: float = 10.0) -> bool:
        """Send what is queued, end the stream and wait for its reply; False if `timeout` ran out."""
        self._closing = True
        self._wake.set()
        if self._thread is None:
            return True
        self._thread.join(timeout)
        finished = not self._thread.is_alive()
        if not finished:
            self._stop.set()
            self._wake.set()
            self._thread.join(0.5)
            log.warning("stream=%s closed with %d items unsent", self.name, len(self._queue))
        return finished

    def stats(self) -> dict[str, int]:
        return {"submitted": self.submitted, "sent": self.sent, "dropped": self.dropped,
                "queued": len(self._queue), "streams_opened": self.streams_opened, "failures": self.failures,
                "refusals": self.refusals}

    @property
    def stopped(self) -> bool:
        """True once the sender gave up (fail_fast after a failure, or an exhausted close)."""
        return self._stop.is_set()

    # -- sender thread ----------------------------------------------------------------------------

    def _run(self) -> None:
        backoff = self._tuning.backoff_initial
        while not self._stop.is_set():
            if self._closing and not self._queue and self.streams_opened:
                return
            channel = self._connection.channel()
            try:
                grpc.channel_ready_future(channel).result(timeout=self._connection.connect_timeout)
            except grpc.FutureTimeoutError:
                channel.close()
                backoff = self._failed(unreachable(self._connection), backoff)
                continue
            backoff = self._tuning.backoff_initial
            try:
                self._stream(channel)
                self.failure = None
                if self._closing:
                    if not self._queue:
                        return
            except grpc.RpcError as err:
                backoff = self._failed(classify(err), backoff)
            finally:
                self._generation += 1
                channel.close()

    def _failed(self, failure: StreamFailure, backoff: float) -> float:
        """Record and log a failure, then stop (fail_fast) or wait before the next attempt; the next backoff."""
        self.failure = failure
        self.failures += 1
        sentence = failure.sentence(self._connection.target)
        if self._fail_fast:
            log.error("stream=%s failed: %s", self.name, sentence)
            self._stop.set()
            return backoff
        if failure.permanent:
            self.refusals += 1
            wait = self._tuning.refused_backoff
            log.error("stream=%s refused permanently (refusal %d), next attempt in %.0f s: %s", self.name,
                      self.refusals, wait, sentence)
            self._stop.wait(wait)
            return self._tuning.backoff_initial
        log.warning("stream=%s %s queued=%d dropped=%d, retry in ~%.1fs: %s", self.name, failure.code,
                    len(self._queue), self.dropped, backoff, sentence)
        return self._pause(backoff)

    def _pause(self, backoff: float) -> float:
        """Sleep `backoff` with jitter (half to full), interruptibly; the next, doubled backoff."""
        self._stop.wait(backoff * (0.5 + self._jitter() / 2))
        return min(backoff * 2, self._tuning.backoff_max)

    def _stream(self, channel: grpc.Channel) -> None:
        dropped = self.dropped
        metadata = self._identity.metadata() + [("x-agent-dropped", str(dropped))]
        if dropped > self._dropped_reported:
            log.warning("stream=%s reconnected to %s; dropped %d items while away (total %d)", self.name,
                        self._connection.target, dropped - self._dropped_reported, dropped)
            self._dropped_reported = dropped
        self.streams_opened += 1
        log.info("stream=%s open target=%s", self.name, self._connection.target)
        call = self._rpc(wire.Stub(channel))
        reply = call(self._messages(self._generation), metadata=metadata)
        self.last_reply = wire.stream_summary(reply)
        log.info("stream=%s closed received=%d rejected=%d agent_id=%s", self.name, *self.last_reply)

    def _messages(self, generation: int) -> Iterator[object]:
        queue = self._queue
        tuning = self._tuning
        while generation == self._generation and not self._stop.is_set():
            if len(queue) < tuning.batch_size and not self._closing:
                self._wake.wait(tuning.flush_interval)
                self._wake.clear()
                if generation != self._generation:
                    return
            chunk: list[T] = []
            while queue and len(chunk) < tuning.batch_size:
                chunk.append(queue.popleft())
            if not chunk:
                if self._closing:
                    return  # half-close: the appliance replies and the call returns
                continue
            if self._enrich is not None:
                self._enrich(chunk)
            yield from self._encode(chunk)
            self.sent += len(chunk)
