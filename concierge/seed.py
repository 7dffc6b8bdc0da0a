"""Seed data for the demo hotel (`make concierge`); safe to run again (skips when the owner exists)."""

from __future__ import annotations

import logging
from datetime import date, timedelta
from typing import TYPE_CHECKING

from concierge.clock import new_id
from concierge.modules.cardex import touch_guest_list

if TYPE_CHECKING:
    from concierge.app import Concierge

log = logging.getLogger(__name__)

DEMO_PASSWORD = "concierge-demo-2026"
DEMO_USERS = {
    "owner": ("owner@aurora.example", "Olivia Owner"),
    "admin": ("admin@aurora.example", "Adam Admin"),
    "manager": ("manager@aurora.example", "Maya Manager"),
    "staff": ("frontdesk@aurora.example", "Felix Frontdesk"),
    "guest": ("guest@aurora.example", "Grace Guest"),
}
KNOWLEDGE = [
    ("hours", "Breakfast hours", "Breakfast is served in the Aurora Restaurant on the ground floor from 6:30 to 10:30 (11:00 on weekends)."),
    ("hours", "Pool and spa hours", "The rooftop pool is open from 7:00 to 21:00; the spa from 9:00 to 20:00. Book treatments at the front desk or in the app."),
    ("faq", "Check-out time", "Check-out is at 11:00. Late check-out until 14:00 can be requested and is free for VIP guests."),
    ("faq", "Wi-Fi password", "Connect to the network Aurora-Guest; the password is on your key card sleeve."),
    ("faq", "Parking", "Underground parking costs 25 EUR per night; the entrance is on Rue des Lilas."),
    ("amenity", "Gym", "The gym on level 1 is open 24 hours with your room key."),
    ("policy", "Pets", "Dogs under 10 kg are welcome for 20 EUR per night."),
]
MENU = [
    ("Club sandwich", "Chicken, bacon, egg, tomato, fries", "mains", 2200),
    ("Margherita pizza", "Tomato, mozzarella, basil", "mains", 1800),
    ("Caesar salad", "Romaine, parmesan, croutons", "starters", 1400),
    ("Chocolate fondant", "Warm, with vanilla ice cream", "desserts", 1100),
    ("Sparkling water", "75 cl", "drinks", 600),
]


def seed_demo(concierge: Concierge, guests: int = 40) -> dict[str, tuple[str, str]]:
    """Create the demo hotel; returns {role: (email, password)}."""
    users = concierge.services["users"]
    credentials = {role: (email, DEMO_PASSWORD) for role, (email, _) in DEMO_USERS.items()}
    if users.store.by_email(DEMO_USERS["owner"][0]) is not None:
        return credentials
    now = concierge.clock.iso()
    hasher = concierge.services["hasher"]
    owner_email, owner_name = DEMO_USERS["owner"]
    owner_id = users.store.create(owner_email, owner_name, hasher.hash(DEMO_PASSWORD), "Hotel Aurora", now)
    org = concierge.services["sessions"].store.first_organization(owner_id)
    ids = {"owner": owner_id}
    for role, (email, name) in DEMO_USERS.items():
        if role != "owner":
            ids[role] = users.store.create(email, name, hasher.hash(DEMO_PASSWORD), None, now)
            users.store.add_member(org, ids[role], role, now)
    today = date.fromisoformat(concierge.clock.today())
    first = ["Ada", "Ben", "Chloe", "Dmitri", "Elena", "Farid", "Greta", "Hiro", "Ines", "Jonas"]
    last = ["Laurent", "Meyer", "Okafor", "Rossi", "Silva", "Tanaka", "Novak", "Haddad"]
    with concierge.db.transaction() as tx:
        for n in range(1, 5):
            for k in range(1, 11):
                tx.execute("INSERT INTO rooms (id, organization_id, number, room_type, floor, housekeeping, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?)",
                           (new_id("rm"), org, f"{n}{k:02d}", "suite" if k == 10 else "double", n, "clean", now, now))
        for kind, title, body in KNOWLEDGE:
            tx.execute("INSERT INTO knowledge (id, organization_id, kind, title, body, created_at, updated_at) VALUES (?,?,?,?,?,?,?)", (new_id("kn"), org, kind, title, body, now, now))
        for name, desc, cat, price in MENU:
            tx.execute("INSERT INTO menu_items (id, organization_id, name, description, category, price_cents, currency, available, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
                       (new_id("mnu"), org, name, desc, cat, price, "EUR", 1, now, now))
        for i in range(guests):
            arrival = today + timedelta(days=(i % 5) - 2)
            status = "arrived" if arrival < today and i % 3 else "expected"
            tx.execute(
                "INSERT INTO guests (id, organization_id, user_id, first_name, last_name, email, phone, room, vip, status, arrival_date, departure_date, notes, created_at, updated_at) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (new_id("gst"), org, ids["guest"] if i == 0 else None, "Grace" if i == 0 else first[i % 10], "Guest" if i == 0 else last[i % 8],
                 DEMO_USERS["guest"][0] if i == 0 else f"guest{i}@mail.example", f"+33 6 12 34 {i:02d} {i:02d}", f"{1 + i % 4}{1 + i % 10:02d}",
                 1 if i % 7 == 0 else 0, "expected" if i == 0 else status, (today if i == 0 else arrival).isoformat(), (arrival + timedelta(days=3)).isoformat(), "", now, now),
            )
        touch_guest_list(tx, org)
    log.info("demo hotel seeded organization=%s", org)
    return credentials
