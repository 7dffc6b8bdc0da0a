"""Protocol facts parsed once per flow and shared by the DPI and signature layers.

The layers run one after another on the analysis thread, so a one-entry cache keyed on the flow
object is enough to parse each payload once however many layers ask.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from appliance.detection.dpi.http_parse import HttpRequest, HttpResponse, parse_request, parse_response
from appliance.detection.dpi.tls_meta import TlsMetadata, tls_metadata
from appliance.detection.dpi.tls_parse import ClientHello
from appliance.model import FlowRecord, Transport

_OUTBOUND = 1


@dataclass(slots=True)
class Facts:
    """What the payload samples of one flow say."""

    http_requests: list[HttpRequest] = field(default_factory=list)
    http_responses: list[HttpResponse] = field(default_factory=list)
    client_hello: ClientHello | None = None
    tls: TlsMetadata | None = None  # hellos and fingerprints (client_hello is tls.client_hello)


class FlowFacts:
    """`facts(flow)` parses the flow's samples on first use and returns the same object after."""

    def __init__(self, tls_views: bool = True) -> None:
        self._tls_views = tls_views  # put the REST view of the TLS metadata on the record (see _read_tls)
        self._flow: FlowRecord | None = None
        self._facts = Facts()
        self.tls_handshakes = 0  # flows with a ClientHello or ServerHello read
        self.tls_incomplete = 0  # of those, a hello cut by the sample size or split beyond the samples
        self.tls_unreadable = 0  # a sample opened a handshake record but no hello could be read
        self.tls_certificates_unreadable = 0  # server certificates `cryptography` could not read

    def facts(self, flow: FlowRecord) -> Facts:
        if flow is self._flow:
            return self._facts
        result = Facts()
        if flow.transport is Transport.TCP and flow.samples:
            handshake = False
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
                self._read_tls(flow, result)
        self._flow = flow
        self._facts = result
        return result

    def _read_tls(self, flow: FlowRecord, result: Facts) -> None:
        meta = tls_metadata(flow)
        if meta is None:
            self.tls_unreadable += 1
            return
        self.tls_handshakes += 1
        if not meta.complete:
            self.tls_incomplete += 1
        self.tls_certificates_unreadable += meta.certificates_unreadable
        result.tls = meta
        if self._tls_views:  # on the record too: the REST flow view shows it without parsing again
            flow.tls = meta.view()
        result.client_hello = meta.client_hello
