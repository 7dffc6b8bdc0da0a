"""Protocol facts parsed once per flow and shared by the DPI and signature layers.

The pipeline runs the layers one after another over a batch of at most LAYER_BATCH flows (pipeline.py), so the
facts of the last FACTS_KEPT flows asked for are kept, by flow object: each payload is parsed once however many
layers ask. The memo, and the way to the facts when nothing needs Python, are C (`native_dpi.FactsMemo`,
facts_memo.h); FlowFacts finishes in Python what is rare (HTTP payloads, a chain in clear, the REST view).

The samples of a TCP flow are walked once in C (`native_dpi.sample_facts`: which may open an HTTP request
or response, both directions' handshake bytes joined, their hellos read, the Facts and TLS metadata made);
`facts_reference` is the same in Python, what the tests hold `FlowFacts.facts` to.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from appliance.detection.dpi.http_parse import HttpRequest, HttpResponse, parse_request, parse_response
from appliance.detection.dpi.tls_fingerprint import FingerprintMemo
from appliance.detection.dpi.tls_meta import (METADATA_MAKERS, TlsMetadata, read_chain, slot_maker,
                                              tls_metadata_reference)
from appliance.detection.dpi.tls_parse import ClientHello
from appliance.model import FlowRecord, Transport
from appliance.native import dpi as native_dpi
from appliance.native.dpi import FactsMemo
from appliance.pipeline import LAYER_BATCH

_OUTBOUND = 1
_TCP = Transport.TCP


@dataclass(slots=True)
class Facts:
    """What the payload samples of one flow say."""

    http_requests: list[HttpRequest] = field(default_factory=list)
    http_responses: list[HttpResponse] = field(default_factory=list)
    client_hello: ClientHello | None = None
    tls: TlsMetadata | None = None  # hellos and fingerprints (client_hello is tls.client_hello)


_FACTS_MAKER = slot_maker(Facts)
# How many flows' facts are kept at least: a batch's. Two generations of this many: a flow is forgotten FACTS_KEPT to
# 2 * FACTS_KEPT flows parsed later, with no per-flow bookkeeping to find the oldest; a batch parses each of its flows
# once at most, so every layer finds all of the batch's.
FACTS_KEPT = LAYER_BATCH


class FlowFacts(FactsMemo):
    """`facts(flow)` parses the flow's samples on first use and returns the same object after (FactsMemo.facts, C:
    appliance/native/facts_memo.h, for the last FACTS_KEPT to 2 * FACTS_KEPT flows asked for). What is rare, HTTP
    payloads to parse, a server chain in clear, the REST view on the record, is finished here (`_finish`)."""

    def __init__(self, tls_views: bool = True, fingerprints: FingerprintMemo | None = None) -> None:
        reader = sample_reader(fingerprints if fingerprints is not None else FingerprintMemo())
        # tls_handshakes (flows with a ClientHello or ServerHello read), tls_incomplete (of those, a hello cut by the
        # sample size or split beyond the samples) and tls_unreadable (a sample opened a handshake record but no hello
        # could be read) are FactsMemo's counters.
        super().__init__(reader, self._finish, _TCP, Facts, FACTS_KEPT, tls_views)
        self.tls_certificates_unreadable = 0  # server certificates `cryptography` could not read

    def _finish(self, flow: FlowRecord, found: tuple[Any, ...]) -> Facts:
        """The facts of a flow whose samples hold what only Python reads, from sample_facts' answer, counted."""
        result, requests, responses, handshake, chain = found
        if requests is not None:
            for payload in requests:
                request = parse_request(payload)
                if request is not None:
                    result.http_requests.append(request)
        if responses is not None:
            for payload in responses:
                response = parse_response(payload)
                if response is not None:
                    result.http_responses.append(response)
        meta = result.tls
        if meta is not None:
            if chain is not None:
                read_chain(meta, chain)
                self.tls_certificates_unreadable += meta.certificates_unreadable
            self.tls_handshakes += 1
            if not meta.complete:
                self.tls_incomplete += 1
            if self.tls_views:  # on the record too: the REST flow view shows it without parsing again
                flow.tls = meta.view()
        elif handshake:  # a sample opened a handshake record, yet neither hello could be read
            self.tls_unreadable += 1
        return result  # type: ignore[no-any-return]


def sample_reader(memo: FingerprintMemo) -> tuple[Any, ...]:
    """The second argument of `native_dpi.sample_facts`: how it makes the objects, and the fingerprint memos."""
    return (*METADATA_MAKERS, _FACTS_MAKER, memo.ja4, memo.ja3, memo.ja4s)


def tls_metadata(flow: FlowRecord, memo: FingerprintMemo | None = None) -> TlsMetadata | None:
    """The handshake metadata of `flow` (read as FlowFacts reads it), or None when its samples hold neither hello."""
    found = native_dpi.sample_facts(flow.samples, sample_reader(memo if memo is not None else FingerprintMemo()))
    if found is None or found[0].tls is None:
        return None
    meta, chain = found[0].tls, found[4]
    if chain is not None:
        read_chain(meta, chain)
    return meta


def facts_reference(flow: FlowRecord) -> tuple[Facts, bool]:
    """`FlowFacts.facts` in Python, one sample at a time: the facts, and whether a sample opened a
    handshake record (FlowFacts counts such a flow as tls_unreadable when it holds no hello)."""
    result = Facts()
    handshake = False
    if flow.transport is Transport.TCP and flow.samples:
        for pkt in flow.samples:
            payload = pkt.payload
            if payload[:1] == b"\x16":
                handshake = True
            elif pkt.direction == _OUTBOUND:
                if payload[:1].isalpha():
                    request = parse_request(payload)
                    if request is not None:
                        result.http_requests.append(request)
            elif payload[:5] == b"HTTP/":
                response = parse_response(payload)
                if response is not None:
                    result.http_responses.append(response)
        if handshake:
            meta = tls_metadata_reference(flow)
            if meta is not None:
                result.tls, result.client_hello = meta, meta.client_hello
    return result, handshake
