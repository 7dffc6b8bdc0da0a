"""SensorServicer: the gRPC face of ingestion. Thin: identify the stream, hand messages on."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from appliance.generated import sensor_pb2, sensor_pb2_grpc
from appliance.ingest.identity import AgentIdentity
from appliance.ingest.service import IngestService, StreamSession, TooManyStreams

log = logging.getLogger(__name__)

_PROCESS_KINDS = {1: "start", 2: "exit"}
_FILE_KINDS = {1: "read", 2: "write", 3: "rename"}

# Decides whether a stream may proceed; raises PermissionError with the reason when it may not
# (certificate bound to another machine, revoked certificate). Supplied by enrollment.
StreamAuthorizer = Callable[[AgentIdentity], None]


def _fingerprint(context: grpc.ServicerContext) -> str:
    """SHA-256 fingerprint (hex) of the client certificate, when the channel is mTLS."""
    auth = context.auth_context()
    pem = auth.get("x509_pem_cert")
    if not pem:
        return ""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes

    return x509.load_pem_x509_certificate(pem[0]).fingerprint(hashes.SHA256()).hex()


class SensorServicer(sensor_pb2_grpc.SensorServiceServicer):
    """Receives the agents' client streams."""

    def __init__(self, ingest: IngestService, authorize: StreamAuthorizer | None = None) -> None:
        self._ingest = ingest
        self._authorize = authorize

    def _open(self, context: grpc.ServicerContext) -> StreamSession:
        metadata = {k.lower(): v for k, v in context.invocation_metadata() if isinstance(v, str)}
        identity = AgentIdentity.from_metadata(metadata, context.peer(), _fingerprint(context))
        if self._authorize is not None:
            try:
                self._authorize(identity)
            except PermissionError as err:
                log.warning("stream refused agent=%s peer=%s reason=%s", identity.agent_id, identity.remote_address, err)
                context.abort(grpc.StatusCode.PERMISSION_DENIED, str(err))
        try:
            return self._ingest.open(identity)
        except TooManyStreams as err:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(err))
            raise  # abort raises; this line only tells type checkers

    def _reply(self, session: StreamSession) -> sensor_pb2.StreamResponse:
        return sensor_pb2.StreamResponse(
            packets_received=session.accepted,
            packets_rejected=session.rejected,
            agent_id=session.identity.agent_id,
        )

    def _consume(self, request_iterator: Iterator, context: grpc.ServicerContext, handle: Callable) -> sensor_pb2.StreamResponse:
        session = self._open(context)
        try:
            for message in request_iterator:
                handle(session, message)
        finally:
            # Runs when the client half-closes and when the stream breaks: flows are never lost.
            self._ingest.close(session)
        return self._reply(session)

    # The two packet streams receive their messages as serialized bytes (see `_handlers`): the
    # fast path parses them itself, so no protobuf object is ever built per packet.
    def StreamPackets(self, request_iterator, context):  # noqa: N802 (generated name)
        return self._consume(request_iterator, context, lambda s, data: self._ingest.packet_bytes(s, data, batched=False))

    def StreamPacketBatches(self, request_iterator, context):  # noqa: N802
        return self._consume(request_iterator, context, lambda s, data: self._ingest.packet_bytes(s, data, batched=True))

    # Event streams also receive bytes and decode each message here: a message that does not
    # decode is skipped and counted, where a deserializer in gRPC would end the stream (INTERNAL).
    def _decoded(self, session: StreamSession, data: bytes, message_type: Any) -> Any:
        try:
            return message_type.FromString(data)
        except DecodeError:
            self._ingest.malformed_event(session)
            return None

    def StreamDnsEvents(self, request_iterator, context):  # noqa: N802
        def handle(session: StreamSession, data: bytes) -> None:
            m = self._decoded(session, data, sensor_pb2.DnsEvent)
            if m is not None:
                self._ingest.dns_event(session, m)
        return self._consume(request_iterator, context, handle)

    def StreamProcesses(self, request_iterator, context):  # noqa: N802
        def handle(session: StreamSession, data: bytes) -> None:
            m = self._decoded(session, data, sensor_pb2.ProcessEvent)
            if m is None:
                return
            self._ingest.process_event(session, {
                "kind": _PROCESS_KINDS.get(m.kind, ""), "timestamp_ms": m.timestamp, "pid": m.pid,
                "ppid": m.ppid, "name": m.name[:256], "path": m.path[:4096],
                "command_line": m.command_line[:8192], "user": m.user[:256], "exit_code": m.exit_code,
            })
        return self._consume(request_iterator, context, handle)

    def StreamFileEvents(self, request_iterator, context):  # noqa: N802
        def handle(session: StreamSession, data: bytes) -> None:
            m = self._decoded(session, data, sensor_pb2.FileEvent)
            if m is None:
                return
            self._ingest.file_event(session, {
                "kind": _FILE_KINDS.get(m.kind, ""), "timestamp_ms": m.timestamp, "pid": m.pid,
                "process_name": m.process_name[:256], "path": m.path[:4096], "new_path": m.new_path[:4096],
                "bytes": m.bytes,
            })
        return self._consume(request_iterator, context, handle)


_SERVICE = "sensor.SensorService"


def _handlers(servicer: SensorServicer) -> dict[str, grpc.RpcMethodHandler]:
    """The generated method table with every request left undeserialized (the servicer decodes)."""
    service = sensor_pb2.DESCRIPTOR.services_by_name["SensorService"]
    return {
        method.name: grpc.stream_unary_rpc_method_handler(
            getattr(servicer, method.name),
            request_deserializer=None,
            response_serializer=sensor_pb2.StreamResponse.SerializeToString,
        )
        for method in service.methods
    }


def create_server(
    servicer: SensorServicer,
    address: str,
    *,
    credentials: grpc.ServerCredentials | None = None,
    max_workers: int = 64,
    max_message_bytes: int = 4 * 1024 * 1024,
) -> tuple[grpc.Server, int]:
    """Build and start a gRPC server on `address` ("host:port", port 0 for any); return it and its port.

    Every open stream holds one worker thread, so `max_workers` is the number of concurrent
    streams; beyond it new streams are refused with RESOURCE_EXHAUSTED rather than queued.
    """
    executor = futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="grpc")
    server = grpc.server(
        executor,
        maximum_concurrent_rpcs=max_workers,
        options=[
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.keepalive_time_ms", 60_000),
            ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
        ],
    )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(_SERVICE, _handlers(servicer)),))
    port = server.add_secure_port(address, credentials) if credentials else server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"cannot listen for gRPC on {address}")
    server.start()
    # grpc.Server.stop() leaves the executor it was given running; let stopping the server end it.
    original_stop = server.stop

    def stop(grace: float | None) -> object:
        event = original_stop(grace)
        def shut_down_executor() -> None:
            event.wait()
            executor.shutdown(wait=False)

        threading.Thread(target=shut_down_executor, daemon=True).start()
        return event

    server.stop = stop  # type: ignore[method-assign]
    return server, port
