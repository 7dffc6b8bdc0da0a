"""The names and numbers the C fast path shares with Python and with the proto contract.

fastpath.c exports its tables (WIRE_FIELDS, REJECT_REASONS, REPAIR_REASONS, END_REASONS, RECORD_ATTRIBUTES,
RECORD_FIELDS, RECORD_WIRE_FIELDS, TIMEOUT_CLASSES); these tests hold each against the side it must agree with, so a renamed field, reason or
attribute on either side fails here instead of silently counting under a wrong name.
"""

from __future__ import annotations

import dataclasses

from appliance.flows import tracker
from appliance.generated import sensor_pb2
from appliance.ingest import convert
from appliance.model import FlowRecord
from appliance.native import fastpath


def test_wire_field_numbers_are_the_contracts() -> None:
    descriptor = sensor_pb2.NetworkPacket.DESCRIPTOR
    assert fastpath.WIRE_FIELDS == {f.name: f.number for f in descriptor.fields}
    assert sensor_pb2.PacketBatch.DESCRIPTOR.fields_by_name["packets"].number == fastpath.BATCH_PACKETS_FIELD


def test_wire_types_are_the_ones_the_parser_reads() -> None:
    # The parser reads payload and process_name as length-delimited, everything else as varints.
    descriptor = sensor_pb2.NetworkPacket.DESCRIPTOR
    strings = {f.name for f in descriptor.fields if f.type in (f.TYPE_BYTES, f.TYPE_STRING)}
    assert strings == {"payload", "process_name"}
    assert all(f.type in (f.TYPE_UINT32, f.TYPE_UINT64, f.TYPE_ENUM) for f in descriptor.fields if f.name not in strings)


def test_reject_and_repair_reasons_are_the_converters() -> None:
    assert fastpath.REJECT_REASONS == (convert.REJECT_ZERO_ADDRESS, convert.REJECT_BAD_DIRECTION, convert.REJECT_BAD_PORT,
                                       convert.REJECT_BAD_PROTOCOL, convert.REJECT_MALFORMED)
    assert fastpath.REPAIR_REASONS == (convert.FIX_TIMESTAMP, convert.FIX_PAYLOAD_TRUNCATED, convert.FIX_SHORT_HEADER,
                                       convert.FIX_PROCESS_NAME)
    # What a reader counts is named from the same table.
    reader = fastpath.WireReader(65535, 0)
    reader.read(b"\x0a\x03\xff\xff\xff", True, 0)  # a batch whose one packet's encoding is broken
    assert reader.rejected == {convert.REJECT_MALFORMED: 1}


def test_end_reasons_and_timeout_classes_are_the_trackers() -> None:
    assert fastpath.END_REASONS == (tracker.END_IDLE, tracker.END_ACTIVE, tracker.END_FULL, tracker.END_TCP_CLOSE,
                                    tracker.END_STREAM, tracker.END_EVICTED, tracker.END_SHUTDOWN)
    assert fastpath.TIMEOUT_CLASSES == tracker.CLASSES


def test_record_attributes_written_from_c_are_flow_record_fields() -> None:
    fields = {f.name for f in dataclasses.fields(FlowRecord)}
    assert set(fastpath.RECORD_ATTRIBUTES) <= fields, set(fastpath.RECORD_ATTRIBUTES) - fields


def test_record_wire_fields_written_from_c_are_the_contracts() -> None:
    from appliance.generated import flow_record_pb2

    descriptor = flow_record_pb2.FlowRecord.DESCRIPTOR
    written = dict(fastpath.RECORD_WIRE_FIELDS)
    assert written.pop("records") == flow_record_pb2.FlowRecordBatch.DESCRIPTOR.fields_by_name["records"].number
    assert written == {f.name: f.number for f in descriptor.fields if f.name not in ("dns", "samples")}


def test_record_fields_built_from_c_are_flow_records_leading_fields_in_order() -> None:
    # The table builds a FlowRecord with one positional call of these fields (and kept_wire by keyword).
    names = [f.name for f in dataclasses.fields(FlowRecord)]
    assert list(fastpath.RECORD_FIELDS) == names[: len(fastpath.RECORD_FIELDS)]
    assert "kept_wire" in names
