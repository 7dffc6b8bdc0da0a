"""HTTP exfiltration (large or sustained one-sided uploads) and covert channels (encoded data in requests)."""

from __future__ import annotations

import re
from collections import deque

from appliance.detection.analysis_config import AnalysisConfig
from appliance.detection.detections import Throttle, make_detection
from appliance.detection.dpi.dga import shannon_entropy
from appliance.detection.facts import Facts
from appliance.model import Category, Detection, FlowRecord, Severity

_NS = 1_000_000_000
_TOKEN = re.compile(r"[A-Za-z0-9+/_\-]{16,}={0,2}")
# Headers whose values are routinely long and random-looking for benign reasons.
_ORDINARY_HEADERS = frozenset({"host", "user-agent", "accept", "accept-encoding", "accept-language", "connection",
                               "content-type", "content-length", "referer", "origin", "authorization",
                               "if-none-match", "etag", "cache-control", "pragma", "upgrade-insecure-requests",
                               "sec-ch-ua", "sec-ch-ua-platform", "sec-ch-ua-mobile", "sec-fetch-site",
                               "sec-fetch-mode", "sec-fetch-dest", "sec-fetch-user", "te", "dnt", "range"})
_MAX_KEYS = 100_000


def encoded_tokens(text: str, min_length: int, min_entropy: float) -> list[str]:
    """Long base64/hex-looking runs in `text` with high entropy (JWT-shaped tokens excluded)."""
    found = []
    for match in _TOKEN.finditer(text):
        token = match.group(0)
        if len(token) >= min_length and not token.startswith("eyJ") and shannon_entropy(token) >= min_entropy:
            found.append(token)
    return found


class HttpAnalyzer:
    """Per (agent, remote address) upload windows, and per-request encoding checks."""

    def __init__(self) -> None:
        self._uploads: dict[tuple[str, str], deque[tuple[int, int, int]]] = {}
        self._throttle = Throttle()

    def analyze(self, flow: FlowRecord, facts: Facts, config: AnalysisConfig) -> list[Detection]:
        requests = facts.http_requests
        if not requests:
            return []
        c = config.http
        address = flow.remote_addr
        host = next((r.host for r in requests if r.host), "")
        now_ns = flow.last_ns
        interval = config.detectors.report_interval_s
        common = dict(agent_id=flow.agent_id, indicator=address, protocol="http", transport="tcp",
                      flow_ids=[flow.flow_id], first_ns=flow.first_ns, last_ns=now_ns, remote_ip=address, domain=host)
        out: list[Detection] = []
        methods = sorted({r.method for r in requests})
        out_bytes, in_bytes = flow.bytes_out, flow.bytes_in  # wire sizes: agents may cut payloads short
        if any(m in ("POST", "PUT", "PATCH") for m in methods):
            key = (flow.agent_id, address)
            window = self._uploads.get(key)
            if window is None:
                if len(self._uploads) >= _MAX_KEYS:
                    self._uploads.clear()
                window = self._uploads[key] = deque(maxlen=10_000)
            window.append((now_ns, out_bytes, in_bytes))
            horizon = now_ns - int(c.exfil_window_s * _NS)
            while window and window[0][0] < horizon:
                window.popleft()
            total_out = sum(o for _, o, _ in window)
            total_in = sum(i for _, _, i in window)
            ratio = total_out / max(total_in, 1)
            evidence = {"host": host, "methods": methods, "flow_bytes_out": out_bytes, "flow_bytes_in": in_bytes,
                        "window_bytes_out": total_out, "window_bytes_in": total_in, "window_uploads": len(window),
                        "out_in_ratio": round(ratio, 1), "window_s": c.exfil_window_s,
                        "content_length": max(r.content_length for r in requests)}
            if out_bytes >= c.large_upload_bytes and out_bytes / max(in_bytes, 1) >= c.exfil_ratio and \
                    self._throttle.allow(("upload", flow.agent_id, address), now_ns, interval):
                reason = f"one upload of {out_bytes} bytes to {host or address} with {in_bytes} bytes back"
                out.append(make_detection("dpi.http.large_upload", Category.HTTP_EXFILTRATION, 0.55, Severity.HIGH,
                                          evidence={**evidence, "reason": reason}, **common))  # type: ignore[arg-type]
            if total_out >= c.exfil_bytes and ratio >= c.exfil_ratio and \
                    self._throttle.allow(("exfil", flow.agent_id, address), now_ns, interval):
                confidence = 0.5 + 0.4 * min(1.0, (total_out / c.exfil_bytes - 1) / 4)
                reason = f"{total_out} bytes uploaded to {host or address} in {len(window)} requests within {c.exfil_window_s:.0f} s"
                out.append(make_detection("dpi.http.exfil_volume", Category.HTTP_EXFILTRATION, confidence, Severity.HIGH,
                                          evidence={**evidence, "reason": reason}, **common))  # type: ignore[arg-type]
        places: dict[str, list[str]] = {}
        for request in requests:
            tokens = encoded_tokens(request.uri, c.token_min_length, c.token_min_entropy)
            if tokens:
                places.setdefault("uri", []).extend(tokens)
            if request.cookie:
                tokens = encoded_tokens(request.cookie, c.token_min_length, c.token_min_entropy)
                if tokens:
                    places.setdefault("cookie", []).extend(tokens)
            for name, value in request.headers.items():
                if name not in _ORDINARY_HEADERS and name != "cookie":
                    tokens = encoded_tokens(value, c.token_min_length, c.token_min_entropy)
                    if tokens:
                        places.setdefault(f"header:{name}", []).extend(tokens)
        if places:
            longest = max((t for ts in places.values() for t in ts), key=len)
            confidence = 0.4 + 0.1 * min(len(places), 3) + 0.1 * (len(longest) >= 4 * c.token_min_length)
            reason = f"encoded data in {', '.join(sorted(places))} of requests to {host or address} ({len(longest)} characters)"
            out.append(make_detection(
                "dpi.http.encoded_data", Category.HTTP_COVERT_CHANNEL, confidence, Severity.MEDIUM,
                evidence={"host": host, "places": sorted(places), "longest_token": len(longest),
                          "token_entropy": round(shannon_entropy(longest), 2), "sample": longest[:64],
                          "uri": requests[0].uri[:200], "reason": reason}, **common))  # type: ignore[arg-type]
        return out
