"""HTTP/1.x request and response heads parsed from payload samples (best effort, never raises)."""

from __future__ import annotations

from dataclasses import dataclass, field

METHODS = frozenset({b"GET", b"POST", b"PUT", b"HEAD", b"DELETE", b"OPTIONS", b"PATCH", b"CONNECT", b"TRACE"})


@dataclass(slots=True)
class HttpRequest:
    method: str
    uri: str
    version: str
    host: str = ""
    user_agent: str = ""
    content_length: int = 0
    cookie: str = ""
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class HttpResponse:
    status: int
    content_length: int = 0


def _headers(lines: list[bytes]) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.partition(b":")
        if sep and name and len(out) < 64:
            out[name.strip().decode("latin-1").lower()] = value.strip().decode("latin-1")[:4096]
    return out


def _int(text: str) -> int:
    try:
        return max(0, int(text))
    except ValueError:
        return 0


def parse_request(payload: bytes) -> HttpRequest | None:
    """The request head at the start of `payload`; None when it is not HTTP."""
    head = payload.split(b"\r\n\r\n", 1)[0]
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or parts[0] not in METHODS or not parts[2].startswith(b"HTTP/"):
        return None
    headers = _headers(lines[1:])
    return HttpRequest(
        method=parts[0].decode(), uri=parts[1].decode("latin-1")[:8192], version=parts[2].decode("latin-1"),
        host=headers.get("host", "").lower().split(":", 1)[0], user_agent=headers.get("user-agent", ""),
        content_length=_int(headers.get("content-length", "0")), cookie=headers.get("cookie", ""), headers=headers,
    )


def parse_response(payload: bytes) -> HttpResponse | None:
    head = payload.split(b"\r\n\r\n", 1)[0]
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        return None
    headers = _headers(lines[1:])
    return HttpResponse(int(parts[1]), _int(headers.get("content-length", "0")))
