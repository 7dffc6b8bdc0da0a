"""HTTP fakes of the external services we cannot reach from tests (Apaleo, Stripe, an OpenAI-compatible LLM).

Each speaks the real service's wire protocol on a loopback port, so the real adapters are exercised
end to end; they record what they received for the tests to assert on.
"""

from __future__ import annotations

import base64
import json
import secrets
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


class FakeService:
    """A threading HTTP server on 127.0.0.1:0 dispatching to `handle(method, path, headers, body)`."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        self.down = 0  # answer 503 to the next N requests
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                outer.requests.append((self.command, self.path, headers, body))
                if outer.down > 0:
                    outer.down -= 1
                    status, payload = 503, {"message": "Service Unavailable"}
                else:
                    status, payload = outer.handle(self.command, self.path, headers, body)
                raw = json.dumps(payload).encode() if payload is not None else b""
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            do_GET = do_POST = do_PUT = do_DELETE = _any

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def handle(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
        raise NotImplementedError

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class FakeApaleo(FakeService):
    """Apaleo identity (client credentials) and Booking API (reservations, reservation actions)."""

    def __init__(self, client_id: str, secret: str, property_id: str, reservations: list[dict[str, Any]]) -> None:
        self.client_id, self.secret, self.property_id = client_id, secret, property_id
        self.reservations = {r["id"]: r for r in reservations}
        self.tokens: set[str] = set()
        super().__init__()

    def handle(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
        url = urllib.parse.urlsplit(path)
        if method == "POST" and url.path == "/connect/token":
            expected = "Basic " + base64.b64encode(f"{self.client_id}:{self.secret}".encode()).decode()
            if headers.get("authorization") != expected or urllib.parse.parse_qs(body.decode()).get("grant_type") != ["client_credentials"]:
                return 401, {"error": "invalid_client"}
            token = secrets.token_hex(8)
            self.tokens.add(token)
            return 200, {"access_token": token, "expires_in": 3600, "token_type": "Bearer"}
        if headers.get("authorization", "").removeprefix("Bearer ") not in self.tokens:
            return 401, None
        if method == "GET" and url.path == "/booking/v1/reservations":
            q = urllib.parse.parse_qs(url.query)
            if q.get("propertyIds") != [self.property_id]:
                return 400, {"messages": ["unknown property"]}
            page, size = int(q["pageNumber"][0]), int(q["pageSize"][0])
            items = sorted(self.reservations.values(), key=lambda r: r["id"])
            chunk = items[(page - 1) * size : page * size]
            return (200, {"reservations": chunk, "count": len(items)}) if chunk else (204, None)
        parts = url.path.split("/")
        if method == "PUT" and url.path.startswith("/booking/v1/reservation-actions/") and parts[-1] in ("checkin", "checkout"):
            res = self.reservations.get(urllib.parse.unquote(parts[-2]))
            if res is None:
                return 404, None
            wanted = {"checkin": ("Confirmed", "InHouse"), "checkout": ("InHouse", "CheckedOut")}[parts[-1]]
            if res["status"] != wanted[0]:
                return 422, {"messages": [f"reservation is {res['status']}"]}
            res["status"] = wanted[1]
            return 204, None
        return 404, None


class FakeStripe(FakeService):
    """Stripe's PaymentIntents API (form-encoded, Idempotency-Key honoured, test payment methods)."""

    def __init__(self, api_key: str) -> None:
        self.api_key = api_key
        self.intents: dict[str, dict[str, Any]] = {}
        self.by_key: dict[str, dict[str, Any]] = {}
        super().__init__()

    def handle(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
        if headers.get("authorization") != f"Bearer {self.api_key}":
            return 401, {"error": {"type": "invalid_request_error", "message": "Invalid API Key provided"}}
        form = {k: v[0] for k, v in urllib.parse.parse_qs(body.decode()).items()}
        key = headers.get("idempotency-key")
        if key and (key, path) in self.by_key:
            return 200, self.by_key[(key, path)]  # type: ignore[index]
        parts = path.strip("/").split("/")
        if path == "/v1/payment_intents":
            pi = {"id": f"pi_{secrets.token_hex(6)}", "object": "payment_intent", "amount": int(form["amount"]), "currency": form["currency"], "capture_method": form.get("capture_method", "automatic"), "status": "requires_payment_method", "metadata": {k[9:-1]: v for k, v in form.items() if k.startswith("metadata[")}, "last_payment_error": None}
            self.intents[pi["id"]] = pi
            status, out = 200, pi
        elif len(parts) == 4 and parts[3] == "confirm":
            pi = self.intents[parts[2]]
            if form.get("payment_method") == "pm_card_chargeDeclined":
                pi.update(status="requires_payment_method", last_payment_error={"message": "Your card was declined.", "code": "card_declined"})
                status, out = 402, {"error": {"type": "card_error", "code": "card_declined", "message": "Your card was declined.", "payment_intent": pi}}
            else:
                pi.update(status="requires_capture" if pi["capture_method"] == "manual" else "succeeded", last_payment_error=None)
                status, out = 200, pi
        elif len(parts) == 4 and parts[3] in ("capture", "cancel"):
            pi = self.intents[parts[2]]
            pi["status"] = "succeeded" if parts[3] == "capture" else "canceled"
            status, out = 200, pi
        else:
            return 404, {"error": {"message": "Unrecognized request URL"}}
        if key and status == 200:
            self.by_key[(key, path)] = out  # type: ignore[index]
        return status, out


class FakeLlm(FakeService):
    """An OpenAI-compatible /chat/completions endpoint answering with `reply(messages)`."""

    def __init__(self, api_key: str, reply: Callable[[list[dict[str, str]]], str]) -> None:
        self.api_key = api_key
        self.reply = reply
        super().__init__()

    def handle(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
        if path != "/v1/chat/completions" or method != "POST":
            return 404, {"error": {"message": "not found"}}
        if headers.get("authorization") != f"Bearer {self.api_key}":
            return 401, {"error": {"message": "bad key"}}
        req = json.loads(body)
        text = self.reply(req["messages"])
        return 200, {"id": "chatcmpl-1", "object": "chat.completion", "model": req["model"], "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}]}
