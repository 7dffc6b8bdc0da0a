"""Property management system adapters: the interface, a simulated PMS (development, tests) and Apaleo."""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Protocol

from concierge.errors import BadRequest, UpstreamError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PmsReservation:
    """A reservation as the concierge needs it, whatever the PMS."""

    reservation_id: str
    first_name: str
    last_name: str
    email: str | None
    phone: str | None
    room: str | None
    arrival: str | None
    departure: str | None
    status: str  # expected | arrived | checked_out | canceled


@dataclass(frozen=True)
class ReservationPage:
    items: list[PmsReservation]
    next_cursor: str | None  # None: last page


class PermanentPmsError(UpstreamError):
    """The PMS refused the operation for good (unknown reservation, not allowed); retrying cannot help."""


class PmsAdapter(Protocol):
    name: str

    def check_in(self, reservation_id: str | None, guest: dict) -> str: ...
    def check_out(self, reservation_id: str | None, guest: dict) -> None: ...
    def reservations(self, cursor: str | None, page_size: int) -> ReservationPage: ...


class SimulatedPms:
    """An in-memory PMS that behaves like a hosted one: paginated reservations, check-in/out, outages."""

    name = "simulated"

    def __init__(self, reservations: list[PmsReservation] | None = None) -> None:
        self._lock = threading.Lock()
        self._reservations: dict[str, PmsReservation] = {r.reservation_id: r for r in reservations or []}
        self.calls: list[tuple[str, str]] = []  # (operation, reservation id), in order
        self.failures_left = 0  # the next N calls fail like an outage (HTTP 503 from a hosted PMS)
        self.fail_after_pages: int | None = None  # reservations() fails once this many pages were served

    def add(self, reservation: PmsReservation) -> None:
        with self._lock:
            self._reservations[reservation.reservation_id] = reservation

    def _maybe_fail(self, operation: str) -> None:
        if self.failures_left > 0:
            self.failures_left -= 1
            raise UpstreamError(f"simulated PMS unavailable during {operation}")

    def check_in(self, reservation_id: str | None, guest: dict) -> str:
        with self._lock:
            self._maybe_fail("check-in")
            if reservation_id is None:  # walk-in: the PMS creates the reservation
                reservation_id = f"SIM-W{len(self._reservations) + 1:05d}"
            current = self._reservations.get(reservation_id)
            if current is not None and current.status in ("checked_out", "canceled"):
                raise PermanentPmsError(f"reservation {reservation_id} is {current.status}")
            base = current or PmsReservation(reservation_id, guest.get("first_name", ""), guest.get("last_name", ""), guest.get("email"), guest.get("phone"), guest.get("room"), None, None, "expected")
            self._reservations[reservation_id] = PmsReservation(**{**base.__dict__, "status": "arrived"})
            self.calls.append(("check_in", reservation_id))
            return reservation_id

    def check_out(self, reservation_id: str | None, guest: dict) -> None:
        with self._lock:
            self._maybe_fail("check-out")
            if reservation_id is None or reservation_id not in self._reservations:
                raise PermanentPmsError(f"unknown reservation {reservation_id}")
            current = self._reservations[reservation_id]
            self._reservations[reservation_id] = PmsReservation(**{**current.__dict__, "status": "checked_out"})
            self.calls.append(("check_out", reservation_id))

    def reservations(self, cursor: str | None, page_size: int) -> ReservationPage:
        with self._lock:
            start = int(cursor or 0)
            if self.fail_after_pages is not None and start // max(page_size, 1) >= self.fail_after_pages:
                self.fail_after_pages = None  # the outage ends; the next call (the resume) works
                raise UpstreamError("simulated PMS timed out while listing reservations")
            ordered = sorted(self._reservations.values(), key=lambda r: r.reservation_id)
            items = ordered[start : start + page_size]
            nxt = str(start + page_size) if start + page_size < len(ordered) else None
            return ReservationPage(items, nxt)


_APALEO_STATUS = {"Confirmed": "expected", "InHouse": "arrived", "CheckedOut": "checked_out", "Canceled": "canceled", "NoShow": "no_show"}


class ApaleoPms:
    """Apaleo's public API: OAuth2 client credentials, Booking API reservations and reservation actions."""

    name = "apaleo"

    def __init__(self, client_id: str, client_secret: str, property_id: str, base_url: str, identity_url: str, timeout: float = 15) -> None:
        self.client_id = client_id
        self.client_secret = client_secret
        self.property_id = property_id
        self.base_url = base_url.rstrip("/")
        self.identity_url = identity_url.rstrip("/")
        self.timeout = timeout
        self._token: tuple[str, float] | None = None

    def _access_token(self) -> str:
        if self._token and self._token[1] > time.time() + 30:
            return self._token[0]
        body = urllib.parse.urlencode({"grant_type": "client_credentials"}).encode()
        req = urllib.request.Request(f"{self.identity_url}/connect/token", data=body, method="POST")
        import base64

        basic = base64.b64encode(f"{self.client_id}:{self.client_secret}".encode()).decode()
        req.add_header("Authorization", f"Basic {basic}")
        req.add_header("Content-Type", "application/x-www-form-urlencoded")
        data = self._send(req)
        self._token = (data["access_token"], time.time() + float(data.get("expires_in", 3600)))
        return self._token[0]

    def _send(self, req: urllib.request.Request) -> dict:
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
                return json.loads(raw) if raw else {}
        except urllib.error.HTTPError as err:
            if 400 <= err.code < 500 and err.code not in (408, 429):
                raise PermanentPmsError(f"apaleo answered {err.code} for {req.full_url}") from err
            raise UpstreamError(f"apaleo answered {err.code} for {req.full_url}") from err
        except (urllib.error.URLError, TimeoutError, OSError) as err:
            raise UpstreamError(f"apaleo unreachable: {err}") from err

    def _api(self, method: str, path: str) -> dict:
        req = urllib.request.Request(f"{self.base_url}{path}", method=method)
        req.add_header("Authorization", f"Bearer {self._access_token()}")
        req.add_header("Accept", "application/json")
        return self._send(req)

    def check_in(self, reservation_id: str | None, guest: dict) -> str:
        if not reservation_id:
            raise PermanentPmsError("apaleo check-in needs a reservation id (walk-ins are created in apaleo first)")
        self._api("PUT", f"/booking/v1/reservation-actions/{urllib.parse.quote(reservation_id)}/checkin")
        return reservation_id

    def check_out(self, reservation_id: str | None, guest: dict) -> None:
        if not reservation_id:
            raise PermanentPmsError("apaleo check-out needs a reservation id")
        self._api("PUT", f"/booking/v1/reservation-actions/{urllib.parse.quote(reservation_id)}/checkout")

    def reservations(self, cursor: str | None, page_size: int) -> ReservationPage:
        page = int(cursor or 1)
        query = urllib.parse.urlencode({"propertyIds": self.property_id, "pageNumber": page, "pageSize": page_size, "expand": "booker"})
        data = self._api("GET", f"/booking/v1/reservations?{query}")
        items = []
        for r in data.get("reservations", []):
            guest = r.get("primaryGuest", {})
            items.append(
                PmsReservation(
                    reservation_id=r["id"],
                    first_name=guest.get("firstName", ""),
                    last_name=guest.get("lastName", "") or "(unknown)",
                    email=guest.get("email"),
                    phone=guest.get("phone"),
                    room=(r.get("unit") or {}).get("name"),
                    arrival=(r.get("arrival") or "")[:10] or None,
                    departure=(r.get("departure") or "")[:10] or None,
                    status=_APALEO_STATUS.get(r.get("status", ""), "expected"),
                )
            )
        total = int(data.get("count", 0))
        nxt = str(page + 1) if page * page_size < total else None
        return ReservationPage(items, nxt)


def build_pms(kind: str, **options: str) -> PmsAdapter:
    if kind == "apaleo":
        return ApaleoPms(options["client_id"], options["client_secret"], options["property_id"], options["base_url"], options["identity_url"])
    if kind == "simulated":
        return SimulatedPms()
    raise BadRequest(f"unknown PMS adapter {kind!r}")
