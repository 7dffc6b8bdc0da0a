"""Console accounts and sessions over the real dashboard: sign-in, cookie, CSRF, roles, rate limit, fixation."""

from __future__ import annotations

import os
import stat

from appliance.dashboard.accounts import FIRST_ADMIN_FILE, verify_password


def test_first_admin_password_is_generated_into_a_0600_file_and_signs_in(console):
    path = console.appliance.tmp / "state" / FIRST_ADMIN_FILE
    assert path.read_text().strip() == console.dashboard.first_admin_password
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    browser = console.browser()
    status, body = browser.login("admin", console.dashboard.first_admin_password)
    assert status == 200 and body["user"] == {"username": "admin", "role": "admin"} and len(body["csrfToken"]) >= 32
    cookie = browser.last_headers["set-cookie"]
    for flag in ("HttpOnly", "Secure", "SameSite=Strict", "Path=/"):
        assert flag in cookie
    assert browser.get("/auth/me") == (200, {"user": {"username": "admin", "role": "admin"}, "csrfToken": browser.csrf})


def test_passwords_are_stored_as_scrypt_hashes_not_text(console):
    row = console.dashboard.users._conn.execute("SELECT password FROM users WHERE username = 'admin'").fetchone()
    assert row[0].startswith("scrypt$") and console.dashboard.first_admin_password not in row[0]
    assert verify_password(console.dashboard.first_admin_password, row[0])


def test_wrong_password_unknown_user_and_disabled_user_get_the_same_401(console):
    admin = console.admin()
    admin.post("/auth/users", {"username": "gone", "password": "gone-password-1", "role": "analyst"})
    assert admin.request("PATCH", "/auth/users/gone", {"disabled": True})[0] == 200
    replies = [console.browser().login(u, p) for u, p in
               (("admin", "wrong-password-x"), ("nobody", "whatever-password"), ("gone", "gone-password-1"))]
    assert replies == [(401, {"error": "wrong username or password", "code": "unauthenticated"})] * 3


def test_no_session_is_401_and_a_forged_cookie_is_401(console):
    browser = console.browser()
    assert browser.get("/auth/me")[0] == 401
    assert browser.get("/api/v1/metrics") == (401, {"error": "Sign in first (no session, or it expired)",
                                                    "code": "unauthenticated"})
    browser.cookie = "A" * 43
    assert browser.get("/api/v1/metrics")[0] == 401
    browser.cookie = "x" * 5000
    assert browser.get("/api/v1/metrics")[0] == 401


def test_sign_in_issues_a_new_session_id_so_a_planted_cookie_is_never_promoted(console):
    browser = console.browser()
    planted = "attacker-chosen-session-id-0000000000000000"
    browser.cookie = planted
    assert browser.login("admin", console.dashboard.first_admin_password)[0] == 200
    assert browser.cookie != planted
    attacker = console.browser()
    attacker.cookie = planted
    assert attacker.get("/auth/me")[0] == 401
    # and signing in again replaces the previous id
    first = browser.cookie
    assert browser.login("admin", console.dashboard.first_admin_password)[0] == 200
    old = console.browser()
    old.cookie = first
    assert old.get("/auth/me")[0] == 401 and browser.get("/auth/me")[0] == 200


def test_logout_needs_csrf_then_ends_the_session(console):
    browser = console.admin()
    assert browser.post("/auth/logout", csrf=False) == (403, {"error": "Missing or wrong X-CSRF-Token header", "code": "csrf"})
    assert browser.get("/auth/me")[0] == 200
    cookie = browser.cookie
    assert browser.post("/auth/logout")[0] == 200
    assert "Max-Age=0" in browser.last_headers["set-cookie"]
    browser.cookie = cookie
    assert browser.get("/auth/me")[0] == 401


def test_idle_sessions_expire(console):
    store = console.dashboard.web.sessions
    browser = console.admin()
    for session in store._sessions.values():
        session.last_seen -= console.appliance.app.settings.dashboard.session_idle_minutes * 60 + 1
    assert browser.get("/auth/me")[0] == 401


def test_failed_sign_ins_are_rate_limited_per_account_even_for_the_right_password(console):
    browser = console.browser()
    for _ in range(5):
        assert browser.login("admin", "not-the-password")[0] == 401
    status, body = browser.login("admin", console.dashboard.first_admin_password)
    assert status == 429 and body["code"] == "rate_limited"
    assert int(browser.last_headers["retry-after"]) > 0
    assert console.dashboard.web.limiter.refused >= 1
    assert console.dashboard.web.counters.by_reason["rate_limited"] >= 1


def test_failed_sign_ins_are_rate_limited_per_address_across_accounts(console):
    browser = console.browser()
    for i in range(20):
        assert browser.login(f"user{i}", "not-the-password")[0] == 401
    assert browser.login("someone-else", "not-the-password")[0] == 429


def test_password_change_checks_the_current_one_and_ends_other_sessions(console):
    admin = console.admin()
    other = console.admin()
    status, body = admin.post("/auth/password", {"current": "wrong-password", "new": "a-brand-new-password"})
    assert status == 403 and body["code"] == "forbidden"
    status, body = admin.post("/auth/password", {"current": console.dashboard.first_admin_password, "new": "short"})
    assert status == 422 and "new" in body["fields"]
    assert admin.post("/auth/password", {"current": console.dashboard.first_admin_password,
                                         "new": "a-brand-new-password"}) == (200, {})
    assert admin.get("/auth/me")[0] == 200 and other.get("/auth/me")[0] == 401
    assert console.browser().login("admin", "a-brand-new-password")[0] == 200


def test_admin_creates_and_disables_an_analyst_and_disabling_ends_their_session(console):
    admin = console.admin()
    status, body = admin.post("/auth/users", {"username": "ana", "password": "analyst-password-1", "role": "analyst"})
    assert status == 201 and body["user"]["role"] == "analyst" and "password" not in body["user"]
    assert admin.post("/auth/users", {"username": "ana", "password": "analyst-password-1", "role": "analyst"})[1]["code"] == "exists"
    status, body = admin.post("/auth/users", {"username": "../etc", "password": "analyst-password-1", "role": "analyst"})
    assert status == 422 and "username" in body["fields"]
    status, body = admin.post("/auth/users", {"username": "bob", "password": "analyst-password-1", "role": "root"})
    assert status == 422 and body["field"] == "role"
    ana = console.browser()
    assert ana.login("ana", "analyst-password-1")[0] == 200
    users = admin.get("/auth/users")[1]["users"]
    assert {u["username"] for u in users} == {"admin", "ana"} and all("password" not in u for u in users)
    assert admin.request("PATCH", "/auth/users/ana", {"disabled": True})[0] == 200
    assert ana.get("/auth/me")[0] == 401
    assert admin.request("PATCH", "/auth/users/admin", {"disabled": True})[0] == 422
    assert admin.request("PATCH", "/auth/users/nobody", {"disabled": True})[0] == 404


def test_an_analyst_cannot_reach_admin_account_routes_or_escalate(console):
    ana = console.analyst()
    assert ana.get("/auth/users") == (403, {"error": "your role (analyst) cannot list users", "code": "forbidden"})
    assert ana.post("/auth/users", {"username": "evil", "password": "evil-password-1", "role": "admin"})[0] == 403
    assert ana.request("PATCH", "/auth/users/ana", {"role": "admin"})[0] == 403
    assert ana.get("/auth/metrics")[0] == 403
    # a role field smuggled into the login body is refused, not honoured
    status, body = console.browser().post("/auth/login", {"username": "ana", "password": "analyst-password-1", "role": "admin"})
    assert status == 422
    assert console.dashboard.users.get("evil") is None and console.dashboard.users.get("ana").role == "analyst"
