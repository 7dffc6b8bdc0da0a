"""PMS integration: the outbox survives PMS outages; the full sync reports counts and resumes."""

from __future__ import annotations


from concierge.pms import PmsReservation, SimulatedPms
from tests.concierge.conftest import make_hotel
from tests.polling import wait_for


def _reservations(n: int) -> list[PmsReservation]:
    return [PmsReservation(f"R{i:04d}", f"First{i}", f"Last{i}", f"r{i}@mail.test", None, f"{100 + i}", "2030-05-01", "2030-05-04", "expected") for i in range(n)]


def test_pms_outage_never_loses_an_arrival(make_concierge) -> None:
    pms = SimulatedPms()
    pms.failures_left = 2  # the PMS is down for the first two attempts
    concierge, base = make_concierge(pms=pms)
    concierge.outbox.base_delay = 0.1
    hotel = make_hotel(concierge, base)
    staff = hotel.client("staff")
    guest = staff.post("/cardex/guests", {"firstName": "Out", "lastName": "Age"}).json()
    resp = staff.post("/cardex/confirm-arrival", {"guestId": guest["id"]})
    assert resp.status_code == 200 and resp.json()["status"] == "arrived"  # local change committed regardless
    # The PMS answers before the outbox records the delivery: wait for the record, then check the PMS saw one call.
    status = wait_for(lambda: (s := staff.get("/integrations/status").json())["outbox"]
                      and s["outbox"][0]["status"] == "delivered" and s, timeout=10)
    assert status, "the outbox never recorded the delivery"
    assert pms.calls == [("check_in", pms.calls[0][1])]
    item = status["outbox"][0]
    assert item["kind"] == "pms.check_in" and item["status"] == "delivered" and item["attempts"] == 3
    assert status["pending"] == 0 and status["dead"] == 0


def test_permanent_pms_refusal_is_marked_dead_not_retried_forever(make_concierge) -> None:
    pms = SimulatedPms(_reservations(1))
    concierge, base = make_concierge(pms=pms)
    hotel = make_hotel(concierge, base)
    staff = hotel.client("staff")
    staff.post("/integrations/full-sync", {})
    guest = staff.get("/cardex/guests", params={"search": "First0"}).json()["items"][0]
    pms.add(PmsReservation("R0000", "First0", "Last0", None, None, None, None, None, "canceled"))  # canceled at the PMS meanwhile
    staff.post("/cardex/confirm-arrival", {"guestId": guest["id"]})
    assert wait_for(lambda: staff.get("/integrations/status").json()["dead"] == 1)


def test_full_sync_reports_counts_and_updates_on_rerun(make_concierge) -> None:
    pms = SimulatedPms(_reservations(25))
    concierge, base = make_concierge(pms=pms)
    hotel = make_hotel(concierge, base)
    staff = hotel.client("staff")
    run = staff.post("/integrations/full-sync", {"pageSize": 10}).json()
    assert (run["status"], run["fetched"], run["created"], run["updated"], run["resumed"]) == ("completed", 25, 25, 0, False)
    assert staff.get("/cardex/guests").json()["total"] == 25
    again = staff.post("/integrations/full-sync", {"pageSize": 10}).json()
    assert (again["created"], again["updated"]) == (0, 25)


def test_interrupted_full_sync_resumes_from_its_cursor(make_concierge) -> None:
    pms = SimulatedPms(_reservations(30))
    pms.fail_after_pages = 2
    concierge, base = make_concierge(pms=pms)
    hotel = make_hotel(concierge, base)
    staff = hotel.client("staff")
    first = staff.post("/integrations/full-sync", {"pageSize": 10}).json()
    assert first["status"] == "interrupted" and first["fetched"] == 20 and first["cursor"] == "20" and first["error"]
    second = staff.post("/integrations/full-sync", {"pageSize": 10}).json()
    assert second["resumed"] and second["runId"] == first["runId"]
    assert (second["status"], second["fetched"], second["created"]) == ("completed", 30, 30)
    assert staff.get("/cardex/guests").json()["total"] == 30


def test_guests_cannot_run_a_sync(make_concierge) -> None:
    concierge, base = make_concierge()
    hotel = make_hotel(concierge, base)
    assert hotel.client("guest").post("/integrations/full-sync", {}).status_code == 403


def test_a_delivery_claimed_by_a_dead_instance_is_retried_after_its_lease(make_concierge) -> None:
    pms = SimulatedPms()
    concierge, base = make_concierge(pms=pms, outbox_interval_seconds=3600)  # no background passes: we drive it
    hotel = make_hotel(concierge, base)
    staff = hotel.client("staff")
    guest = staff.post("/cardex/guests", {"firstName": "Lease", "lastName": "Expired"}).json()
    concierge.outbox.stop()  # this instance "dies" right after claiming the row
    staff.post("/cardex/confirm-arrival", {"guestId": guest["id"]})
    with concierge.db.transaction() as tx:
        tx.execute("UPDATE outbox SET status = 'sending', next_attempt_at = ?", (concierge.clock.now() + concierge.outbox.LEASE_SECONDS,))
    assert concierge.outbox.run_once() == 0  # still leased
    concierge.clock.offset += concierge.outbox.LEASE_SECONDS + 1
    assert concierge.outbox.run_once() == 1
    assert pms.calls[0][0] == "check_in"
    concierge.clock.offset = 0
