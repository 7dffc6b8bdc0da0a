"""The triage state machine: which status an alert may move to from its current one."""

from __future__ import annotations

from appliance.errors import ApplianceError

CLOSED = frozenset({"Resolved", "FalsePositive"})
# Triage transitions an analyst may make; a closed alert can only be reopened as New.
TRANSITIONS: dict[str, frozenset[str]] = {
    "New": frozenset({"Acknowledged", "Investigating", "Resolved", "FalsePositive"}),
    "Acknowledged": frozenset({"Investigating", "Resolved", "FalsePositive"}),
    "Investigating": frozenset({"Acknowledged", "Resolved", "FalsePositive"}),
    "Resolved": frozenset({"New"}),
    "FalsePositive": frozenset({"New"}),
}


class InvalidTransition(ApplianceError):
    """The requested triage status cannot follow the alert's current one."""

    def __init__(self, current: str, wanted: str) -> None:
        allowed = ", ".join(sorted(TRANSITIONS[current])) or "none"
        super().__init__(f"cannot move an alert from {current} to {wanted} (allowed: {allowed})")
