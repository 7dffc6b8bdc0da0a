"""The composition root: `build(settings)` constructs every object and wires the modules under their prefixes."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import bottle

from concierge import __doc__ as product_doc
from concierge.api import Api, SchemaPlugin, openapi_document
from concierge.audit import AuditLog
from concierge.clock import Clock
from concierge.database import Database, open_database
from concierge.http import Edge, ErrorPlugin, Server, default_error_handler
from concierge.mail import SpoolMailer
from concierge.ai import AiProvider, OfflineAi, OpenAiCompatible
from concierge.idempotency import IdempotencyStore
from concierge.modules import ai_concierge, analytics, booking, cardex, chat, checkin, docs, health, integrations, invitations, menu, payment, rooms, tickets, today, users
from concierge.payments import PaymentProvider, SandboxProvider, StripeProvider
from concierge.records import RecordStore
from concierge.outbox import OutboxDispatcher
from concierge.pms import PmsAdapter, SimulatedPms, build_pms
from concierge.pubsub import PubSub, open_pubsub
from concierge.sessions import PasswordHasher, SessionService, SessionStore
from concierge.settings import Settings
from concierge.streams import StreamHub

log = logging.getLogger(__name__)

VERSION = "1.0.0"


@dataclass
class Concierge:
    """The running application's parts, for the entry point and tests."""

    settings: Settings
    db: Database
    pubsub: PubSub
    hub: StreamHub
    clock: Clock
    api: Api
    app: bottle.Bottle
    wsgi: Any
    outbox: OutboxDispatcher
    pms: PmsAdapter
    mailer: SpoolMailer
    services: dict[str, Any] = field(default_factory=dict)
    server: Server | None = None

    def openapi(self) -> dict[str, Any]:
        return openapi_document(self.api.endpoints, "Concierge API", VERSION, (product_doc or "").strip())

    def start(self, port: int | None = None) -> int:
        """Start serving on a background thread; returns the bound port (port 0 picks a free one)."""
        threads = self.settings.sse_max_streams_total + self.settings.request_threads
        self.server = Server(self.wsgi, self.settings.host, self.settings.port if port is None else port, threads)
        self.outbox.start()
        bound = self.server.start()
        log.info("concierge listening host=%s port=%d threads=%d", self.settings.host, bound, threads)
        return bound

    def stop(self) -> None:
        self.hub.close()
        if self.server is not None:
            self.server.stop()
        self.outbox.stop()
        self.pubsub.close()
        self.db.close()


def build(
    settings: Settings,
    clock: Clock | None = None,
    pms: PmsAdapter | None = None,
    payments: PaymentProvider | None = None,
    ai: AiProvider | None = None,
) -> Concierge:
    """Construct the object graph. `pms`, `payments` and `ai` replace the configured adapters (tests, demos)."""
    clock = clock or Clock()
    db = open_database(settings.sqlite_path, settings.database_url)
    pubsub = open_pubsub(settings.pubsub_url, settings.sse_replay_size)
    hub = StreamHub(pubsub, settings.sse_heartbeat_seconds, settings.sse_max_streams_per_user, settings.sse_max_streams_total)
    if pms is None:
        pms = build_pms(
            settings.pms_adapter,
            client_id=settings.apaleo_client_id,
            client_secret=settings.apaleo_client_secret,
            property_id=settings.apaleo_property_id,
            base_url=settings.apaleo_base_url,
            identity_url=settings.apaleo_identity_url,
        )
    if payments is None:
        payments = StripeProvider(settings.stripe_api_key, settings.stripe_base_url) if settings.payment_provider == "stripe" else SandboxProvider()
    if ai is None:
        ai = OpenAiCompatible(settings.ai_base_url, settings.ai_api_key, settings.ai_model) if settings.ai_provider == "openai" else OfflineAi()
    mailer = SpoolMailer(settings.state_dir / "mail", "concierge@localhost")

    session_store = SessionStore(db)
    sessions = SessionService(session_store, clock, settings.session_idle_seconds, settings.session_absolute_seconds, settings.trust_proxy)
    hasher = PasswordHasher(n=settings.kdf_n)

    def pms_check_in(payload: dict[str, Any]) -> None:
        with db.transaction(write=False) as tx:
            guest = tx.one("SELECT * FROM guests WHERE id = ?", (payload["guestId"],)) or {}
        reservation = pms.check_in(payload.get("reservationId"), guest)
        if guest and not guest.get("pms_reservation_id"):
            with db.transaction() as tx:
                tx.execute("UPDATE guests SET pms_reservation_id = ? WHERE id = ? AND pms_reservation_id IS NULL", (reservation, payload["guestId"]))
                cardex.touch_guest_list(tx, guest["organization_id"], payload["guestId"])

    def pms_check_out(payload: dict[str, Any]) -> None:
        with db.transaction(write=False) as tx:
            guest = tx.one("SELECT * FROM guests WHERE id = ?", (payload["guestId"],)) or {}
        pms.check_out(guest.get("pms_reservation_id") or payload.get("reservationId"), guest)

    outbox = OutboxDispatcher(db, clock, {"pms.check_in": pms_check_in, "pms.check_out": pms_check_out}, settings.outbox_interval_seconds)

    app = bottle.Bottle()
    app.default_error_handler = default_error_handler  # type: ignore[method-assign]
    app.install(ErrorPlugin())
    app.install(SchemaPlugin(sessions, settings.check_responses))
    api = Api(app)

    audit = AuditLog(db, clock)
    user_service = users.UserService(users.UserStore(db), hasher, sessions, clock, audit)
    public_url = f"http://{settings.host}:{settings.port}"
    invitation_service = invitations.InvitationService(db, user_service.store, audit, mailer, clock, settings.invitation_ttl_seconds, public_url)
    cardex_service = cardex.CardexService(cardex.GuestStore(db), pubsub, mailer, clock, outbox.kick, public_url)

    def table(name: str, prefix: str, noun: str, booleans: tuple[str, ...] = ()) -> RecordStore:
        return RecordStore(db, clock, name, prefix, noun, booleans)

    menu_store = table("menu_items", "mnu", "Menu item", ("available",))
    booking_service = booking.BookingService(db, table("bookings", "bkg", "Booking"), table("room_service_orders", "ord", "Order"), menu_store, sessions.resolve_role)
    payment_service = payment.PaymentService(db, payments, IdempotencyStore(db, clock), clock, settings.payment_webhook_secret)
    concierge_ai = ai_concierge.ConciergeAi(db, ai)
    sync_service = integrations.SyncService(db, pms, clock, sessions.resolve_role)

    api.mount("/health", "health", health.routes())
    api.mount("/users", "users", users.routes(user_service))
    api.mount("/users", "users", invitations.routes(invitation_service))
    api.mount("/cardex", "cardex", cardex.routes(cardex_service))
    api.mount("/check-in", "check-in", checkin.routes(hub, db))
    api.mount("/rooms", "rooms", rooms.routes(table("rooms", "rm", "Room")))
    api.mount("/menu", "menu", menu.routes(menu_store))
    api.mount("/booking", "booking", booking.routes(booking_service))
    api.mount("/chat", "chat", chat.routes(chat.ChatService(db, concierge_ai, clock, sessions.resolve_role)))
    api.mount("/ai", "ai", ai_concierge.routes(concierge_ai, table("knowledge", "kn", "Knowledge entry")))
    api.mount("/payment", "payment", payment.routes(payment_service))
    api.mount("/integrations", "integrations", integrations.routes(sync_service))
    api.mount("/tickets", "tickets", tickets.routes(tickets.TicketService(table("tickets", "tkt", "Ticket"))))
    api.mount("/today", "today", today.routes(today.TodayService(db, clock)))
    api.mount("/analytics", "analytics", analytics.routes(analytics.AnalyticsService(db, clock)))

    concierge = Concierge(
        settings=settings, db=db, pubsub=pubsub, hub=hub, clock=clock, api=api, app=app,
        wsgi=Edge(app, settings.cors_origins, settings.trust_proxy), outbox=outbox, pms=pms, mailer=mailer,
        services={
            "users": user_service, "cardex": cardex_service, "sessions": sessions, "hasher": hasher, "payments": payment_service,
            "payment_provider": payments, "ai": concierge_ai, "invitations": invitation_service, "sync": sync_service, "booking": booking_service,
        },
    )
    docs.mount(app, concierge.openapi, sessions, settings.production, settings.openapi_enabled)
    return concierge
