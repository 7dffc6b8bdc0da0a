"""Payment providers behind one interface: a sandbox that behaves like Stripe test mode, and Stripe itself.

Both sign webhooks the Stripe way (`Stripe-Signature: t=<ts>,v1=<hmac-sha256(secret, "<ts>.<body>")>`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Protocol

from concierge.errors import BadRequest, UpstreamError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProviderIntent:
    """The provider's view of a payment intent after an operation."""

    ref: str
    status: str
    last_error: str | None = None


class PaymentProvider(Protocol):
    name: str

    def create(self, amount: int, currency: str, capture_method: str, metadata: dict[str, str], idempotency_key: str) -> ProviderIntent: ...
    def confirm(self, ref: str, payment_method: str, idempotency_key: str) -> ProviderIntent: ...
    def capture(self, ref: str, amount: int | None) -> ProviderIntent: ...
    def cancel(self, ref: str) -> ProviderIntent: ...


def sign(secret: str, body: bytes, timestamp: int | None = None) -> str:
    """A Stripe-Signature header value for `body`."""
    ts = int(time.time()) if timestamp is None else timestamp
    mac = hmac.new(secret.encode(), f"{ts}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={ts},v1={mac}"


def verify(secret: str, body: bytes, header: str, tolerance: int = 300, now: float | None = None) -> bool:
    """Stripe's scheme: any v1 signature matching, timestamp within `tolerance` seconds."""
    parts: dict[str, list[str]] = {}
    for item in header.split(","):
        key, _, value = item.strip().partition("=")
        parts.setdefault(key, []).append(value)
    try:
        ts = int(parts.get("t", [""])[0])
    except ValueError:
        return False
    if abs((time.time() if now is None else now) - ts) > tolerance:
        return False
    expected = hmac.new(secret.encode(), f"{ts}.".encode() + body, hashlib.sha256).hexdigest()
    return any(hmac.compare_digest(expected, sig) for sig in parts.get("v1", []))


# Stripe's test payment methods and what confirming with each does.
SANDBOX_METHODS: dict[str, tuple[str, str | None]] = {
    "pm_card_visa": ("ok", None),
    "pm_card_mastercard": ("ok", None),
    "pm_card_authenticationRequired": ("action", None),
    "pm_card_chargeDeclined": ("declined", "Your card was declined."),
    "pm_card_chargeDeclinedInsufficientFunds": ("declined", "Your card has insufficient funds."),
}


class SandboxProvider:
    """In-memory provider with Stripe's test-mode behaviour (test payment methods, 3-D Secure, capture)."""

    name = "sandbox"

    def __init__(self, latency: float = 0.0) -> None:
        self.latency = latency  # seconds per call, like a network round trip (tests use it for in-flight keys)
        self._lock = threading.Lock()
        self._intents: dict[str, dict[str, Any]] = {}
        self._by_key: dict[str, str] = {}
        self.create_calls = 0

    def _wait(self) -> None:
        if self.latency:
            time.sleep(self.latency)

    def create(self, amount: int, currency: str, capture_method: str, metadata: dict[str, str], idempotency_key: str) -> ProviderIntent:
        self._wait()
        with self._lock:
            if idempotency_key in self._by_key:  # the provider is idempotent too
                ref = self._by_key[idempotency_key]
            else:
                self.create_calls += 1
                ref = f"pi_sbx_{secrets.token_hex(8)}"
                self._intents[ref] = {"amount": amount, "capture_method": capture_method, "status": "requires_payment_method"}
                self._by_key[idempotency_key] = ref
            return ProviderIntent(ref, self._intents[ref]["status"])

    def confirm(self, ref: str, payment_method: str, idempotency_key: str) -> ProviderIntent:
        self._wait()
        with self._lock:
            intent = self._intents[ref]
            outcome, error = SANDBOX_METHODS.get(payment_method, ("declined", "No such payment method"))
            if outcome == "ok":
                intent["status"] = "requires_capture" if intent["capture_method"] == "manual" else "succeeded"
            elif outcome == "action":
                intent["status"] = "requires_action"
            else:
                intent["status"] = "requires_payment_method"
            return ProviderIntent(ref, intent["status"], error)

    def complete_action(self, ref: str, success: bool = True) -> ProviderIntent:
        """The customer finished (or failed) 3-D Secure; the real provider then sends a webhook."""
        with self._lock:
            intent = self._intents[ref]
            if success:
                intent["status"] = "requires_capture" if intent["capture_method"] == "manual" else "succeeded"
            else:
                intent["status"] = "requires_payment_method"
            return ProviderIntent(ref, intent["status"])

    def capture(self, ref: str, amount: int | None) -> ProviderIntent:
        self._wait()
        with self._lock:
            self._intents[ref]["status"] = "succeeded"
            return ProviderIntent(ref, "succeeded")

    def cancel(self, ref: str) -> ProviderIntent:
        self._wait()
        with self._lock:
            self._intents[ref]["status"] = "canceled"
            return ProviderIntent(ref, "canceled")


class StripeProvider:
    """Stripe's REST API (form-encoded, Bearer secret key, Idempotency-Key forwarded)."""

    name = "stripe"

    def __init__(self, api_key: str, base_url: str = "https://api.stripe.com", timeout: float = 20) -> None:
        self.api_key = api_key
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout

    def _call(self, path: str, form: dict[str, Any], idempotency_key: str | None = None) -> ProviderIntent:
        data = urllib.parse.urlencode(form).encode()
        req = urllib.request.Request(f"{self.base_url}{path}", data=data, method="POST")
        req.add_header("Authorization", f"Bearer {self.api_key}")
        req.add_header("Content-Type", "application/x-www-form-urlencoded")
        req.add_header("Stripe-Version", "2024-06-20")
        if idempotency_key:
            req.add_header("Idempotency-Key", idempotency_key)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                obj = json.loads(resp.read())
        except urllib.error.HTTPError as err:
            payload = json.loads(err.read() or b"{}").get("error", {})
            if err.code == 402 and payload.get("payment_intent"):  # card declined: the intent still moved
                pi = payload["payment_intent"]
                return ProviderIntent(pi["id"], pi["status"], payload.get("message"))
            if 400 <= err.code < 500:
                raise BadRequest(f"Payment provider refused the request: {payload.get('message', err.code)}") from err
            raise UpstreamError(f"stripe answered {err.code}") from err
        except (urllib.error.URLError, OSError) as err:
            raise UpstreamError(f"stripe unreachable: {err}") from err
        error = (obj.get("last_payment_error") or {}).get("message")
        return ProviderIntent(obj["id"], obj["status"], error)

    def create(self, amount: int, currency: str, capture_method: str, metadata: dict[str, str], idempotency_key: str) -> ProviderIntent:
        form: dict[str, Any] = {"amount": amount, "currency": currency.lower(), "capture_method": capture_method}
        form.update({f"metadata[{k}]": v for k, v in metadata.items()})
        return self._call("/v1/payment_intents", form, idempotency_key)

    def confirm(self, ref: str, payment_method: str, idempotency_key: str) -> ProviderIntent:
        return self._call(f"/v1/payment_intents/{ref}/confirm", {"payment_method": payment_method}, idempotency_key)

    def capture(self, ref: str, amount: int | None) -> ProviderIntent:
        return self._call(f"/v1/payment_intents/{ref}/capture", {"amount_to_capture": amount} if amount else {})

    def cancel(self, ref: str) -> ProviderIntent:
        return self._call(f"/v1/payment_intents/{ref}/cancel", {})
