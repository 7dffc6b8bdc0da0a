"""Protocol facts parsed once per flow and shared by the DPI and signature layers.

The layers run one after another on the analysis thread, so a one-entry cache keyed on the flow
object is enough to parse each payload once however many layers ask.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from appliance.detection.dpi.http_parse import HttpRequest, HttpResponse, parse_request, parse_response
from appliance.detection.dpi.tls_parse import ClientHello, parse_client_hello
from appliance.model import FlowRecord, Transport

_OUTBOUND = 1


@dataclass(slots=True)
class Facts:
    """What the payload samples of one flow say."""

    http_requests: list[HttpRequest] = field(default_factory=list)
    http_responses: list[HttpResponse] = field(default_factory=list)
    client_hello: ClientHello | None = None


class FlowFacts:
    """`facts(flow)` parses the flow's samples on first use and returns the same object after."""

    def __init__(self) -> None:
        self._flow: FlowRecord | None = None
        self._facts = Facts()

    def facts(self, flow: FlowRecord) -> Facts:
        if flow is self._flow:
            return self._facts
        result = Facts()
        if flow.transport is Transport.TCP and flow.samples:
            for pkt in flow.samples:
                payload = pkt.payload
                if pkt.direction == _OUTBOUND:
                    first = payload[:1]
                    if first == b"\x16" and result.client_hello is None:
                        result.client_hello = parse_client_hello(payload)
                    elif first.isalpha():
                        request = parse_request(payload)
                        if request is not None:
                            result.http_requests.append(request)
                elif payload[:5] == b"HTTP/":
                    response = parse_response(payload)
                    if response is not None:
                        result.http_responses.append(response)
        self._flow = flow
        self._facts = result
        return result
