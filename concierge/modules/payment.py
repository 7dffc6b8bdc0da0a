"""/payment: payment intents (Stripe's lifecycle) through a provider, idempotent creation and confirmation,
and the provider's signed, de-duplicated webhooks."""

from __future__ import annotations

import logging
from typing import Any, Literal

import bottle
from pydantic import ConfigDict, Field

from concierge.api import Access, Call, Endpoint, Id, OutSchema, QuerySchema, Schema
from concierge.clock import Clock, new_id
from concierge.database import Database, IntegrityError, Row
from concierge.errors import BadRequest, NotFound
from concierge.idempotency import IdempotencyStore
from concierge.payments import PaymentProvider, verify
from concierge.statemachines import PAYMENT

log = logging.getLogger(__name__)

PaymentStatus = Literal["requires_payment_method", "requires_confirmation", "requires_action", "processing", "requires_capture", "succeeded", "canceled"]
IDEMPOTENCY_HEADER = (("Idempotency-Key", True, "Required. Same key + same body replays the first response; other body 422; in flight 409"),)


class IntentIn(Schema):
    amount: int = Field(gt=0, le=10_000_000, description="Minor units (cents)")
    currency: str = Field(pattern=r"^[A-Z]{3}$")
    capture_method: Literal["automatic", "manual"] = "automatic"
    guest_id: Id | None = None
    description: str = Field(default="", max_length=500)


class IntentPatch(Schema):
    description: str | None = Field(default=None, max_length=500)
    amount: int | None = Field(default=None, gt=0, le=10_000_000)


class ConfirmIn(Schema):
    intent_id: Id
    payment_method: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_]+$")


class CaptureIn(Schema):
    intent_id: Id
    amount_to_capture: int | None = Field(default=None, gt=0)


class CancelIn(Schema):
    intent_id: Id
    cancellation_reason: Literal["duplicate", "fraudulent", "requested_by_customer", "abandoned"] | None = None


class IntentOut(OutSchema):
    id: str
    provider: str
    provider_ref: str
    amount: int
    currency: str
    capture_method: str
    status: PaymentStatus
    guest_id: str | None
    description: str
    payment_method: str | None
    last_error: str | None
    created_at: str
    updated_at: str


class IntentList(OutSchema):
    items: list[IntentOut]


class IntentsQuery(QuerySchema):
    status: PaymentStatus | None = None


class IntentParams(Schema):
    intent_id: Id


class WebhookObject(Schema):
    model_config = ConfigDict(extra="allow")
    id: str = Field(min_length=1, max_length=255)
    status: str | None = None


class WebhookData(Schema):
    model_config = ConfigDict(extra="allow")
    object: WebhookObject


class WebhookIn(Schema):
    """A provider event (Stripe's shape); only payment_intent.* events change state."""

    model_config = ConfigDict(extra="allow")
    id: str = Field(min_length=1, max_length=255)
    type: str = Field(min_length=1, max_length=255)
    data: WebhookData


class WebhookOut(OutSchema):
    received: bool
    duplicate: bool


WEBHOOK_STATUS = {
    "payment_intent.succeeded": "succeeded",
    "payment_intent.payment_failed": "requires_payment_method",
    "payment_intent.canceled": "canceled",
    "payment_intent.processing": "processing",
    "payment_intent.requires_action": "requires_action",
    "payment_intent.amount_capturable_updated": "requires_capture",
}


class PaymentService:
    """Local payment intents mirrored from the provider; every status change checked by the PAYMENT machine."""

    def __init__(self, db: Database, provider: PaymentProvider, idempotency: IdempotencyStore, clock: Clock, webhook_secret: str) -> None:
        self.db = db
        self.provider = provider
        self.idempotency = idempotency
        self.clock = clock
        self.webhook_secret = webhook_secret

    def get(self, org_id: str, intent_id: str) -> Row:
        with self.db.transaction(write=False) as tx:
            row = tx.one("SELECT * FROM payment_intents WHERE id = ? AND organization_id = ?", (intent_id, org_id))
        if row is None:
            raise NotFound("Payment intent not found")
        return row

    def list(self, org_id: str, status: str | None) -> list[Row]:
        with self.db.transaction(write=False) as tx:
            if status:
                return tx.all("SELECT * FROM payment_intents WHERE organization_id = ? AND status = ? ORDER BY created_at DESC, id", (org_id, status))
            return tx.all("SELECT * FROM payment_intents WHERE organization_id = ? ORDER BY created_at DESC, id", (org_id,))

    def create(self, org_id: str, body: IntentIn, key: str) -> Row:
        if body.guest_id:
            with self.db.transaction(write=False) as tx:
                if tx.one("SELECT 1 AS ok FROM guests WHERE id = ? AND organization_id = ?", (body.guest_id, org_id)) is None:
                    raise NotFound("Guest not found")
        iid = new_id("pi")
        remote = self.provider.create(body.amount, body.currency, body.capture_method, {"concierge_id": iid, "organization": org_id}, f"{org_id}:{key}")
        now = self.clock.iso()
        with self.db.transaction() as tx:
            tx.execute(
                "INSERT INTO payment_intents (id, organization_id, provider, provider_ref, amount, currency, capture_method, status, guest_id, description, created_at, updated_at) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (iid, org_id, self.provider.name, remote.ref, body.amount, body.currency, body.capture_method, remote.status, body.guest_id, body.description, now, now),
            )
        return self.get(org_id, iid)

    def _move(self, org_id: str, intent: Row, status: str, error: str | None = None, payment_method: str | None = None) -> Row:
        if status != intent["status"]:
            PAYMENT.check(intent["status"], status)
        with self.db.transaction() as tx:
            tx.execute(
                "UPDATE payment_intents SET status = ?, last_error = ?, payment_method = COALESCE(?, payment_method), updated_at = ? WHERE id = ?",
                (status, error, payment_method, self.clock.iso(), intent["id"]),
            )
        log.info("payment transition intent=%s from=%s to=%s", intent["id"], intent["status"], status)
        return self.get(org_id, intent["id"])

    def confirm(self, org_id: str, body: ConfirmIn, key: str) -> Row:
        intent = self.get(org_id, body.intent_id)
        if intent["status"] not in ("requires_payment_method", "requires_confirmation"):
            raise_invalid(intent["status"], "requires_confirmation")
        remote = self.provider.confirm(intent["provider_ref"], body.payment_method, f"{org_id}:{key}")
        if intent["status"] == "requires_payment_method":  # attaching the method is the first step
            intent = self._move(org_id, intent, "requires_confirmation", payment_method=body.payment_method)
        return self._move(org_id, intent, remote.status, remote.last_error, body.payment_method)

    def capture(self, org_id: str, body: CaptureIn) -> Row:
        intent = self.get(org_id, body.intent_id)
        PAYMENT.check(intent["status"], "succeeded") if intent["status"] == "requires_capture" else raise_invalid(intent["status"], "succeeded")
        if body.amount_to_capture and body.amount_to_capture > intent["amount"]:
            raise BadRequest("amountToCapture exceeds the authorized amount")
        remote = self.provider.capture(intent["provider_ref"], body.amount_to_capture)
        return self._move(org_id, intent, remote.status)

    def cancel(self, org_id: str, body: CancelIn) -> Row:
        intent = self.get(org_id, body.intent_id)
        PAYMENT.check(intent["status"], "canceled")
        remote = self.provider.cancel(intent["provider_ref"])
        return self._move(org_id, intent, remote.status)

    def patch(self, org_id: str, intent_id: str, body: IntentPatch) -> Row:
        intent = self.get(org_id, intent_id)
        changes = body.model_dump(exclude_unset=True, exclude_none=True)
        if "amount" in changes and intent["status"] not in ("requires_payment_method", "requires_confirmation"):
            raise BadRequest(f"The amount can only change before confirmation (intent is {intent['status']})")
        if changes:
            with self.db.transaction() as tx:
                sets = ", ".join(f"{k} = ?" for k in changes)
                tx.execute(f"UPDATE payment_intents SET {sets}, updated_at = ? WHERE id = ?", [*changes.values(), self.clock.iso(), intent_id])
        return self.get(org_id, intent_id)

    def webhook(self, raw: bytes, signature: str, event: WebhookIn) -> bool:
        """Apply a verified provider event once; returns True when it was a duplicate."""
        if not verify(self.webhook_secret, raw, signature):
            raise BadRequest("Invalid webhook signature")
        # One transaction: if applying the event fails, its id is not recorded and the provider's retry applies it.
        with self.db.transaction() as tx:
            try:
                tx.execute("INSERT INTO webhook_events (id, provider, type, received_at) VALUES (?,?,?,?)", (event.id, self.provider.name, event.type, self.clock.iso()))
            except IntegrityError:
                log.info("webhook duplicate ignored event=%s type=%s", event.id, event.type)
                return True
            target = WEBHOOK_STATUS.get(event.type)
            if target is None:
                return False
            intent = tx.one("SELECT * FROM payment_intents WHERE provider_ref = ?", (event.data.object.id,))
            if intent is None:
                log.warning("webhook for unknown intent ref=%s type=%s", event.data.object.id, event.type)
                return False
            if intent["status"] != target and target in PAYMENT.transitions.get(intent["status"], ()):
                error = (getattr(event.data.object, "last_payment_error", None) or {}).get("message") if target == "requires_payment_method" else None
                self._move(intent["organization_id"], intent, target, error)
            elif intent["status"] != target:
                log.warning("webhook out of order ignored intent=%s current=%s event=%s", intent["id"], intent["status"], event.type)
        return False


def raise_invalid(current: str, target: str) -> None:
    from concierge.errors import InvalidTransition

    raise InvalidTransition(PAYMENT.name, current, target)


def routes(service: PaymentService) -> list:
    def org(call: Call) -> str:
        return call.auth.organization_id

    def scope(call: Call, name: str) -> str:
        return f"{call.auth.organization_id}:{call.auth.user_id}:{name}"

    def idempotent(call: Call, name: str, operation: Any) -> dict[str, Any]:
        body, replayed = service.idempotency.run(
            scope(call, name), call.headers.get("Idempotency-Key"), call.body.model_dump(mode="json"), lambda: IntentOut(**operation()).model_dump(mode="json", by_alias=True)
        )
        if replayed:
            bottle.response.set_header("Idempotent-Replayed", "true")
        return body

    S = Access.STAFF
    P = IntentParams
    return [
        (Endpoint("GET", "/intents", "Payment intents of the organization", S, query=IntentsQuery, response=IntentList), lambda c: IntentList(items=[IntentOut(**r) for r in service.list(org(c), c.query.status)])),
        (Endpoint("GET", "/intents/<intent_id>", "One payment intent", S, params=P, response=IntentOut), lambda c: IntentOut(**service.get(org(c), c.params.intent_id))),
        (Endpoint("POST", "/intents", "Create a payment intent (Idempotency-Key required)", S, body=IntentIn, response=IntentOut, status=201, headers=IDEMPOTENCY_HEADER), lambda c: idempotent(c, "create", lambda: service.create(org(c), c.body, c.headers["Idempotency-Key"]))),
        (Endpoint("PATCH", "/intents/<intent_id>", "Change description, or amount before confirmation", S, params=P, body=IntentPatch, response=IntentOut), lambda c: IntentOut(**service.patch(org(c), c.params.intent_id, c.body))),
        (Endpoint("POST", "/intents/confirm", "Confirm with a payment method (Idempotency-Key required)", S, body=ConfirmIn, response=IntentOut, headers=IDEMPOTENCY_HEADER), lambda c: idempotent(c, "confirm", lambda: service.confirm(org(c), c.body, c.headers["Idempotency-Key"]))),
        (Endpoint("POST", "/intents/capture", "Capture an authorized (requires_capture) intent", S, body=CaptureIn, response=IntentOut), lambda c: IntentOut(**service.capture(org(c), c.body))),
        (Endpoint("POST", "/intents/cancel", "Cancel an intent that has not succeeded", S, body=CancelIn, response=IntentOut), lambda c: IntentOut(**service.cancel(org(c), c.body))),
        (
            Endpoint("POST", "/webhooks", "Provider events (signature verified, duplicates ignored)", Access.PUBLIC, body=WebhookIn, response=WebhookOut, headers=(("Stripe-Signature", True, "t=<unix>,v1=<hex hmac-sha256>"),)),
            lambda c: WebhookOut(received=True, duplicate=service.webhook(c.raw_body, c.headers.get("Stripe-Signature", ""), c.body)),
        ),
    ]
