"""The published state machines, as tables: {state: allowed next states}. Enforced by `StateMachine.check`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from concierge.errors import InvalidTransition


@dataclass(frozen=True)
class StateMachine:
    """A named transition table; `initial` is where new records start."""

    name: str
    initial: str
    transitions: Mapping[str, frozenset[str]]

    @property
    def states(self) -> tuple[str, ...]:
        return tuple(self.transitions)

    def check(self, current: str, target: str) -> None:
        """Raise InvalidTransition (400, naming from and to) unless current -> target is allowed."""
        if target not in self.transitions.get(current, frozenset()):
            raise InvalidTransition(self.name, current, target)


def _machine(name: str, initial: str, table: Mapping[str, tuple[str, ...]]) -> StateMachine:
    return StateMachine(name, initial, {k: frozenset(v) for k, v in table.items()})


CHECK_IN = _machine(
    "check-in",
    "expected",
    {
        "expected": ("arrived", "no_show", "canceled"),
        "arrived": ("checked_out",),
        "no_show": ("arrived",),  # a late arrival is still welcome
        "checked_out": (),
        "canceled": (),
    },
)

BOOKING = _machine(
    "booking",
    "requested",
    {
        "requested": ("confirmed", "declined", "canceled"),
        "confirmed": ("completed", "canceled", "no_show"),
        "declined": (),
        "canceled": (),
        "completed": (),
        "no_show": (),
    },
)

ROOM_SERVICE = _machine(
    "room-service order",
    "placed",
    {
        "placed": ("accepted", "canceled"),
        "accepted": ("preparing", "canceled"),
        "preparing": ("on_the_way",),
        "on_the_way": ("delivered",),
        "delivered": (),
        "canceled": (),
    },
)

TICKET = _machine(
    "ticket",
    "open",
    {
        "open": ("in_progress", "resolved", "canceled"),
        "in_progress": ("open", "resolved", "canceled"),
        "resolved": ("closed", "open"),
        "closed": (),
        "canceled": (),
    },
)

# Modelled on Stripe's PaymentIntent lifecycle.
PAYMENT = _machine(
    "payment intent",
    "requires_payment_method",
    {
        "requires_payment_method": ("requires_confirmation", "canceled"),
        "requires_confirmation": ("requires_action", "processing", "requires_capture", "succeeded", "requires_payment_method", "canceled"),
        "requires_action": ("processing", "requires_capture", "succeeded", "requires_payment_method", "canceled"),
        "processing": ("requires_capture", "succeeded", "requires_payment_method"),
        "requires_capture": ("succeeded", "canceled"),
        "succeeded": (),
        "canceled": (),
    },
)

# Only the invitee accepts or declines; an admin revokes; time expires.
INVITATION = _machine(
    "invitation",
    "pending",
    {
        "pending": ("accepted", "declined", "revoked", "expired"),
        "accepted": (),
        "declined": (),
        "revoked": (),
        "expired": (),
    },
)

MACHINES: dict[str, StateMachine] = {m.name: m for m in (CHECK_IN, BOOKING, ROOM_SERVICE, TICKET, PAYMENT, INVITATION)}


def markdown_table(machine: StateMachine) -> str:
    """The README rendering of one machine (kept in sync by a test)."""
    lines = [f"| from | allowed to |", "| --- | --- |"]
    for state, nxt in machine.transitions.items():
        lines.append(f"| `{state}` | {', '.join(f'`{s}`' for s in sorted(nxt)) or '(final)'} |")
    return "\n".join(lines)
