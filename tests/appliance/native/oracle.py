"""The specification of the fast path's wire entry points, built from the reference model and upb.

`read_wire(data, batched)` must return what the reference converter returns for the packets upb
parses out of `data`. Where upb refuses bytes the fast path's contract takes over: a broken
NetworkPacket is counted once as `malformed_message` (the rest of its batch goes on); a batch
whose own framing breaks is counted once more and ends there; a process name that is not UTF-8 is
decoded with U+FFFD and counted as `process_name_replaced` when the packet is kept.

These classes are also the stand-ins the differential tests run against themselves (to check the
harness) while the C code does not exist.
"""

from __future__ import annotations

import time

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from appliance.generated import sensor_pb2
from appliance.flows.packets import RawPacket
from tests.appliance.native.protowire import split_batch
from tests.appliance.native.reference_model import ReferenceConverter, ReferenceFlowTracker

MALFORMED = "malformed_message"
FIX_PROCESS_NAME = "process_name_replaced"


def _lax_packet_class() -> type:
    """NetworkPacket with `process_name` declared as bytes: parses what upb refuses for UTF-8 alone."""
    proto = descriptor_pb2.FileDescriptorProto()
    sensor_pb2.DESCRIPTOR.CopyToProto(proto)
    proto.name, proto.package = "tests_native_lax_sensor.proto", "tests_native_lax"
    kept = [m for m in proto.message_type if m.name == "NetworkPacket"]
    del proto.message_type[:], proto.service[:]
    proto.message_type.extend(kept)
    for field in proto.message_type[0].field:
        if field.type_name:
            field.type_name = field.type_name.replace(".sensor.", ".tests_native_lax.")
        if field.name == "process_name":
            field.type = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tests_native_lax.NetworkPacket"))


_LaxPacket = _lax_packet_class()
_SCALARS = ("local_ip", "remote_ip", "local_port", "remote_port", "protocol", "timestamp", "direction",
            "size", "payload", "tcp_flags", "pid")


def parse_packet(data: bytes) -> tuple[sensor_pb2.NetworkPacket | None, bool]:
    """One encoded NetworkPacket as upb parses it, and whether its process name had to be repaired;
    (None, False) when the encoding is broken."""
    try:
        return sensor_pb2.NetworkPacket.FromString(data), False
    except DecodeError:
        pass
    try:
        lax = _LaxPacket.FromString(data)
    except DecodeError:
        return None, False
    raw_name = lax.process_name
    name = raw_name.decode("utf-8", "replace")
    # upb refuses a bad name even when a later occurrence of the field replaces it; the value
    # that counts is the last one, so only that one can need a repair.
    repaired = name.encode("utf-8", "surrogatepass") != raw_name
    fields = {f: getattr(lax, f) for f in _SCALARS}
    return sensor_pb2.NetworkPacket(process_name=name, **fields), repaired


def _check_against_upb(data: bytes, pieces: list[bytes], broken: bool) -> None:
    """The framing scan must agree with upb wherever upb has an opinion (guards this oracle)."""
    try:
        batch = sensor_pb2.PacketBatch.FromString(data)
    except DecodeError:
        sound = not broken and all(parse_packet(p)[0] is not None and not parse_packet(p)[1] for p in pieces)
        strict = sound and all(_parses(p) for p in pieces)
        assert not strict, f"oracle: upb refuses a batch the framing scan finds sound: {data.hex()}"
        return
    assert not broken, f"oracle: upb accepts a batch the framing scan finds broken: {data.hex()}"
    assert list(batch.packets) == [sensor_pb2.NetworkPacket.FromString(p) for p in pieces], data.hex()


def _parses(data: bytes) -> bool:
    try:
        sensor_pb2.NetworkPacket.FromString(data)
    except DecodeError:
        return False
    return True


class OracleConverter(ReferenceConverter):
    """The reference converter plus `read_wire`, defined through upb as above."""

    @property
    def wire(self) -> OracleConverter:
        """The reader a tracker is built with for `add_wire` (the real one is the C WireReader of a PacketConverter)."""
        return self

    def read_wire(self, data: bytes, batched: bool, now_ns: int | None = None) -> list[RawPacket]:
        if now_ns is None:
            now_ns = time.time_ns()
        pieces, broken = split_batch(data) if batched else ([data], False)
        if batched:
            _check_against_upb(data, pieces, broken)
        out: list[RawPacket] = []
        for piece in pieces:
            message, renamed = parse_packet(piece)
            if message is None:
                self._count(self.rejected, MALFORMED)
                continue
            kept = self.read((message,), now_ns)
            if kept and renamed:
                self._count(self.repaired, FIX_PROCESS_NAME)
            out += kept
        if broken:
            self._count(self.rejected, MALFORMED)
        return out

    @staticmethod
    def framing_breaks(data: bytes) -> bool:
        return split_batch(data)[1]


class OracleFlowTracker(ReferenceFlowTracker):
    """The reference tracker plus `add_wire` (parse, validate and track in one call) with the
    reader it was built with, as `FlowTracker(..., reader=converter.wire)`."""

    def __init__(self, *args: object, reader: OracleConverter | None = None, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._reader = reader

    def add_wire(self, agent_id: str, data: bytes, batched: bool, now_ns: int | None = None) -> tuple[int, int]:
        if self._reader is None:
            raise TypeError("this tracker was built without a reader: add_packets only")
        before = sum(self._reader.rejected.values())
        packets = self._reader.read_wire(data, batched, now_ns)
        self.add_packets(agent_id, packets)
        return len(packets), sum(self._reader.rejected.values()) - before
