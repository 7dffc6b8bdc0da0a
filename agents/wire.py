"""Conversion of the agent's own types into the generated protobuf messages (the only such place)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from agents.model import INBOUND, OUTBOUND, CapturedPacket, ProcessEvent

try:
    from agents.generated import sensor_pb2, sensor_pb2_grpc
except ImportError as err:  # pragma: no cover - a source checkout without `make agents-gen`
    raise ImportError("agents/generated is missing: run `make agents-gen` (protobuf codegen)") from err

# Enum values as the generated stubs type them.
_PROCESS_KINDS = {"start": sensor_pb2.ProcessEvent.START, "exit": sensor_pb2.ProcessEvent.EXIT}
_DIRECTIONS = {OUTBOUND: sensor_pb2.OUTBOUND, INBOUND: sensor_pb2.INBOUND}

Stub = sensor_pb2_grpc.SensorServiceStub


def packet_batch(packets: Sequence[CapturedPacket]) -> Iterable[object]:
    """One PacketBatch carrying `packets` (for StreamPacketBatches)."""
    make = sensor_pb2.NetworkPacket
    batch = sensor_pb2.PacketBatch()
    batch.packets.extend(
        make(local_ip=p.local_ip, remote_ip=p.remote_ip, local_port=p.local_port, remote_port=p.remote_port,
             protocol=p.protocol, timestamp=p.timestamp_ms, direction=_DIRECTIONS[p.direction], size=p.size,
             payload=p.payload, tcp_flags=p.tcp_flags, pid=p.pid, process_name=p.process_name)
        for p in packets
    )
    return (batch,)


def process_events(events: Sequence[ProcessEvent]) -> Iterable[object]:
    """One ProcessEvent message per event (for StreamProcesses)."""
    return [
        sensor_pb2.ProcessEvent(kind=_PROCESS_KINDS[e.kind], timestamp=e.timestamp_ms, pid=e.pid, ppid=e.ppid,
                                name=e.name, path=e.path, command_line=e.command_line, user=e.user,
                                exit_code=e.exit_code)
        for e in events
    ]


def stream_summary(reply: object) -> tuple[int, int, str]:
    """(received, rejected, agent_id) of a StreamResponse."""
    return reply.packets_received, reply.packets_rejected, reply.agent_id  # type: ignore[attr-defined]
