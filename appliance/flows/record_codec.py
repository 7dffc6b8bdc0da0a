"""The flow record contract (proto/flow_record.proto) to and from the appliance's own types.

Finished flows leave the ingest side as a `FlowRecordBatch` and are read back into `FlowRecord`s by
whoever analyses them: the local analysis process, an analyzer of the cluster. Resolver traffic that
analysis needs before the flows it explains end travels as a `DnsBatch`. Generated classes stay in
this module, like `ingest.convert` for the agent contract.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import replace
from operator import attrgetter

from appliance.errors import ApplianceError
from appliance.generated import flow_record_pb2 as pb
from appliance.model import DnsAnswer, DnsMessage, FlowRecord, IcmpInfo, Packet, Transport
from appliance.native import slot_maker
from appliance.native.fastpath import SlotMaker, WireFlow, decode_dns_batch, decode_records, encode_dns_batch

VERSION = 1
_VERSION_FIELD = pb.FlowRecordBatch(version=VERSION).SerializeToString()

# An ended flow as the flow table hands it over: a FlowRecord, or, for a flow Python never held, the
# record already in this contract's encoding (appliance.native.fastpath.WireFlow).
EndedFlow = FlowRecord | WireFlow

# A DNS message as the flow table hands it over: a DnsMessage, or (from the C table) the message already
# serialized as sensor.flows.DnsMessage, which the hand-off to analysis carries as it is.
AnyDns = DnsMessage | bytes

_TRANSPORTS = {1: Transport.ICMP, 6: Transport.TCP, 17: Transport.UDP}
# The transport of each IP protocol number, as the C table and reader look it up (protocols past 255 are OTHER).
TRANSPORT_OF_PROTOCOL = tuple(_TRANSPORTS.get(p, Transport.OTHER) for p in range(256))


# The decoders' makers (native.slot_maker): what decode_records calls instead of the dataclasses, whose generated
# __init__ was most of its cost. A FlowRecord from its fields up to `samples` (tls and kept_wire at their defaults).
_MAKE_RECORD = slot_maker(SlotMaker, FlowRecord, [f.name for f in dataclasses.fields(FlowRecord)].index("samples") + 1)
_MAKE_PACKET, _MAKE_DNS, _MAKE_ANSWER, _MAKE_ICMP = (slot_maker(SlotMaker, c) for c in (Packet, DnsMessage, DnsAnswer, IcmpInfo))


_entry_of = attrgetter("entry")  # a WireFlow's records entry; a FlowRecord has none


class RecordError(ApplianceError):
    """Bytes that are not a flow record batch this version can read."""


# -- encoding -------------------------------------------------------------------------------------
def _dns_pb(m: DnsMessage) -> pb.DnsMessage:
    return pb.DnsMessage(
        id=m.id, is_response=m.is_response, rcode=m.rcode, qname=m.qname, qtype=m.qtype, qclass=m.qclass,
        answers=[pb.DnsAnswer(name=a.name, rtype=a.rtype, ttl=a.ttl, data=a.data) for a in m.answers],
        malformed=m.malformed, timestamp_ns=m.timestamp_ns,
    )


def encode(records: Sequence[EndedFlow]) -> bytes:
    """A serialized FlowRecordBatch of `records`, in their order.

    A WireFlow is already a records entry: it is joined as it is. FlowRecords in a row are encoded
    together (the serialization of a batch without its version is a run of records entries).
    """
    try:  # every record a WireFlow (the server's hand-off: the C table wrote them all): joined in one C call
        return b"".join([_VERSION_FIELD, *map(_entry_of, records)])
    except AttributeError:  # a FlowRecord among them (one Python kept: ICMP, a thread's pipeline)
        pass
    parts = [_VERSION_FIELD]
    run: list[FlowRecord] = []
    for r in records:
        if type(r) is WireFlow:
            if run:
                parts.append(_encode_records(run))
                run = []
            parts.append(r.entry)
        else:
            run.append(r)
    if run:
        parts.append(_encode_records(run))
    return b"".join(parts)


def _encode_records(records: list[FlowRecord]) -> bytes:
    """The records entries of `records`.

    Built in place with `add()`: handing finished sub-messages to a constructor copies each one, which
    made encoding twice as slow.
    """
    batch = pb.FlowRecordBatch()
    add = batch.records.add
    for r in records:
        record = add(
            flow_id=r.flow_id, agent_id=r.agent_id, protocol=r.protocol, local_ip=r.local_ip, local_port=r.local_port,
            remote_ip=r.remote_ip, remote_port=r.remote_port, first_ns=r.first_ns, last_ns=r.last_ns,
            packets_out=r.packets_out, packets_in=r.packets_in, bytes_out=r.bytes_out, bytes_in=r.bytes_in,
            payload_bytes_out=r.payload_bytes_out, payload_bytes_in=r.payload_bytes_in, tcp_flags=r.tcp_flags,
            pid=r.pid, process_name=r.process_name, end_reason=r.end_reason,
        )
        dns = r.dns
        index: dict[int, int] = {}
        if dns:
            index = {id(m): i + 1 for i, m in enumerate(dns)}
            record.dns.extend(_dns_pb(m) for m in dns)
        if r.kept_wire:  # the C table's DNS messages and samples, already in this contract's encoding
            record.MergeFromString(r.kept_wire)
        sample = record.samples.add
        for s in r.samples:
            sample(timestamp_ns=s.timestamp_ns, direction=s.direction, size=s.size, payload=s.payload, tcp_flags=s.tcp_flags,
                   pid=s.pid, process_name=s.process_name, dns_index=index.get(id(s.dns), 0) if s.dns is not None else 0)
    return batch.SerializeToString()


def entries(records: Sequence[EndedFlow]) -> list[bytes]:
    """The records entries of a FlowRecordBatch (tag, length, record), one per record: what a batch joins after
    its version field. FlowRecords are encoded together, as `encode` does (a batch per record cost twice as much)."""
    held = [r for r in records if type(r) is not WireFlow]
    encoded = iter(_split_entries(_encode_records(held)) if held else ())
    return [r.entry if type(r) is WireFlow else next(encoded) for r in records]


def _split_entries(data: bytes) -> list[bytes]:
    """The entries of a run of records entries (each: the tag 0x0a, a varint length, the record)."""
    out, at, end = [], 0, len(data)
    while at < end:
        size, shift, i = 0, 0, at + 1
        while True:
            byte = data[i]
            size |= (byte & 0x7F) << shift
            i += 1
            if byte < 0x80:
                break
            shift += 7
        out.append(data[at : i + size])
        at = i + size
    return out


def dns_bytes(message: AnyDns) -> bytes:
    """A DNS message as a serialized sensor.flows.DnsMessage (C's already is)."""
    return message if type(message) is bytes else _dns_pb(message).SerializeToString()


def encode_dns(items: Iterable[tuple[str, AnyDns, bool]]) -> bytes:
    """A serialized DnsBatch of (agent_id, message, from_event) items; serialized messages go in as they are.

    Framed in C (fastpath.encode_dns_batch) rather than through the generated classes: there, a serialized
    message had to be parsed into the batch to be written out again, a third of the hand-off thread's time
    (py-spy, 2026-11-24); framed in Python it still cost ~0.6 us per answer. Tests hold the bytes equal to upb's.
    """
    return encode_dns_batch([(agent_id, dns_bytes(message), from_event) for agent_id, message, from_event in items])


def _dns(m: pb.DnsMessage) -> DnsMessage:
    return DnsMessage(m.id, m.is_response, m.rcode, m.qname, m.qtype, m.qclass,
                      [DnsAnswer(a.name, a.rtype, a.ttl, a.data) for a in m.answers], m.malformed, m.timestamp_ns)


def dns_message_of(message: AnyDns) -> DnsMessage:
    """A DnsMessage of what the flow table handed over (a serialized one is read; an object is itself)."""
    return message if type(message) is DnsMessage else _dns(pb.DnsMessage.FromString(message))


def _samples(r: pb.FlowRecord, dns: list[DnsMessage]) -> list[Packet]:
    protocol = r.protocol
    transport = _TRANSPORTS.get(protocol, Transport.OTHER)
    local_ip, remote_ip, local_port, remote_port = r.local_ip, r.remote_ip, r.local_port, r.remote_port
    samples = []
    for s in r.samples:
        payload = s.payload
        icmp = IcmpInfo(payload[0], payload[1], payload[4:]) if protocol == 1 and len(payload) >= 4 else None
        message = dns[s.dns_index - 1] if 0 < s.dns_index <= len(dns) else None
        samples.append(Packet(s.timestamp_ns, s.direction, protocol, transport, local_ip, remote_ip, local_port,
                              remote_port, s.size, payload, s.tcp_flags, s.pid, s.process_name, message, icmp))
    return samples


def _record(r: pb.FlowRecord) -> FlowRecord:
    protocol = r.protocol
    dns = [_dns(m) for m in r.dns]
    return FlowRecord(
        r.flow_id, r.agent_id, protocol, _TRANSPORTS.get(protocol, Transport.OTHER), r.local_ip, r.local_port,
        r.remote_ip, r.remote_port, r.first_ns, r.last_ns, r.packets_out, r.packets_in, r.bytes_out, r.bytes_in,
        r.payload_bytes_out, r.payload_bytes_in, r.tcp_flags, r.pid, r.process_name, r.end_reason, dns,
        _samples(r, dns),
    )


def record_of(flow: EndedFlow) -> FlowRecord:
    """The FlowRecord of an ended flow (a WireFlow decoded; a FlowRecord as it is)."""
    if type(flow) is not WireFlow:
        return flow
    batch = pb.FlowRecordBatch()
    try:
        batch.ParseFromString(flow.entry)
    except Exception as err:  # written by fastpath.c: a failure here is a bug there
        raise RecordError(f"the flow table's record does not parse: {err}") from None
    return _record(batch.records[0])


def expand_samples(record: FlowRecord) -> None:
    """Move the DNS messages and samples the C flow table kept as wire entries into `record.dns` and
    `record.samples` (an ended flow about to be analysed in this process). A flow's kept packets are either
    all wire (every flow but ICMP) or all Python-kept (ICMP), so the samples' DNS indexes need no offset."""
    if record.kept_wire:
        dns, samples = _wire_kept(record)
        record.dns.extend(dns)
        record.samples.extend(samples)
        record.kept_wire = b""


def expanded(record: FlowRecord) -> FlowRecord:
    """`record` with every DNS message and sample as objects, without touching it (a live flow, a finished
    one on view)."""
    if not record.kept_wire:
        return record
    dns, samples = _wire_kept(record)
    return replace(record, dns=record.dns + dns, samples=record.samples + samples, kept_wire=b"")


def _wire_kept(record: FlowRecord) -> tuple[list[DnsMessage], list[Packet]]:
    header = pb.FlowRecord(protocol=record.protocol, local_ip=record.local_ip, local_port=record.local_port,
                           remote_ip=record.remote_ip, remote_port=record.remote_port)
    try:
        header.MergeFromString(record.kept_wire)
    except Exception as err:  # written by fastpath.c: a failure here is a bug there
        raise RecordError(f"the flow table's kept packets do not parse: {err}") from None
    dns = [_dns(m) for m in header.dns]
    return dns, _samples(header, dns)


def sample_mask(protocols: Iterable[int]) -> bytes:
    """`decode`'s `sampled`: a flag per IP protocol number."""
    wanted = set(protocols)
    return bytes(p in wanted for p in range(256))


def decode(data: bytes, sampled: bytes | None = None) -> list[FlowRecord]:
    """The records of a serialized FlowRecordBatch; RecordError when it is not one this version reads.

    `sampled` (`sample_mask`): only records of these IP protocols get their samples; the others' sample
    entries are skipped unread, and their `samples` stay empty (what a reader that never looks at them wants).

    Read in C (fastpath.decode_records): the same records `_decode_python` makes, field for field, at a
    fraction of the cost of upb attribute reads and a Python call per record, sample and message. Within one
    call, equal names and numbers may be one str or int object (they are immutable); lists are never shared.
    A record's `dns` is a native DnsList: equal to the list `_decode_python` makes, its DnsMessages made only
    when Python asks for them, while the C DNS loops read its entries in place (appliance/native/dns_list.h).
    """
    try:
        return decode_records(data, _MAKE_RECORD, _MAKE_PACKET, _MAKE_DNS, _MAKE_ANSWER, _MAKE_ICMP, TRANSPORT_OF_PROTOCOL,
                              sampled)
    except ValueError as err:  # broken encoding, invalid UTF-8 (UnicodeDecodeError), another version
        raise RecordError(f"not a flow record batch of version {VERSION}: {err}") from None


def _decode_python(data: bytes) -> list[FlowRecord]:
    """`decode` through upb: the reference the C reader is held equal to (tests/appliance/native)."""
    batch = pb.FlowRecordBatch()
    try:
        batch.ParseFromString(data)
    except Exception as err:  # google.protobuf.message.DecodeError and friends
        raise RecordError(f"not a flow record batch: {err}") from None
    if batch.version != VERSION:
        raise RecordError(f"flow record batch version {batch.version}; this appliance reads version {VERSION}")
    return [_record(r) for r in batch.records]


def decode_dns(data: bytes) -> list[tuple[str, DnsMessage, bool]]:
    """The (agent_id, message, from_event) items of a serialized DnsBatch, read in C (`fastpath.decode_dns_batch`:
    the analysis process reads every DNS answer the ingest side saw, ~2-4 us each through upb)."""
    try:
        items = decode_dns_batch(data, _MAKE_DNS, _MAKE_ANSWER)
    except ValueError as err:  # UnicodeDecodeError included: a string field that is not UTF-8
        raise RecordError(f"not a DNS batch: {err}") from None
    return items if items is not None else _decode_dns_python(data)  # None: a repeated message field, which upb merges


def _decode_dns_python(data: bytes) -> list[tuple[str, DnsMessage, bool]]:
    """What decode_dns returns, read with upb: the reference the C reader is tested against."""
    batch = pb.DnsBatch()
    try:
        batch.ParseFromString(data)
    except Exception as err:
        raise RecordError(f"not a DNS batch: {err}") from None
    return [(i.agent_id, _dns(i.message), i.from_event) for i in batch.items]
