"""/users: sign-up, sign-in, sign-out, the caller, organization switch, memberships (admin; joining is by
invitation, see invitations.py), leaving, and the audit trail."""

from __future__ import annotations

import logging
from typing import Any, Literal

import bottle
from pydantic import Field

from concierge.api import Access, Call, Email, Endpoint, Id, OutSchema, QuerySchema, Schema
from concierge.audit import AuditLog
from concierge.clock import Clock, new_id
from concierge.database import Database, IntegrityError, Tx
from concierge.errors import AuthenticationRequired, BadRequest, Conflict, Forbidden, NotFound
from concierge.sessions import AuthContext, PasswordHasher, SessionService

log = logging.getLogger(__name__)

Role = Literal["guest", "staff", "manager", "admin", "owner"]


class SignUpIn(Schema):
    email: Email
    password: str = Field(min_length=10, max_length=200)
    name: str = Field(min_length=1, max_length=120)
    organization_name: str | None = Field(default=None, min_length=1, max_length=120, description="Creates a hotel organization owned by the new user")


class SignInIn(Schema):
    email: Email
    password: str = Field(min_length=1, max_length=200)


class SwitchOrganizationIn(Schema):
    organization_id: Id


class UserOut(OutSchema):
    id: str
    email: str
    name: str


class AuthOut(OutSchema):
    user_id: str
    organization_id: str | None
    role: Role | None


class MembershipOut(OutSchema):
    id: str
    user_id: str
    organization_id: str
    organization_name: str
    email: str
    name: str
    role: Role


class SessionOut(OutSchema):
    user: UserOut
    auth: AuthOut
    csrf_token: str
    memberships: list[MembershipOut]


class MembershipList(OutSchema):
    items: list[MembershipOut]


class LeaveIn(Schema):
    organization_id: Id


class AuditQuery(QuerySchema):
    limit: int = Field(default=100, ge=1, le=500)
    offset: int = Field(default=0, ge=0)


class AuditEventOut(OutSchema):
    id: str
    seq: int
    actor_id: str | None
    action: str
    subject_id: str
    detail: dict[str, Any]
    created_at: str


class AuditList(OutSchema):
    items: list[AuditEventOut]


class MembershipPut(Schema):
    role: Role


class MembershipPatch(Schema):
    role: Role | None = None


class MembershipParams(Schema):
    membership_id: Id


class UserStore:
    """users, organizations and memberships tables."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def create(self, email: str, name: str, password_hash: str, org_name: str | None, now: str) -> str:
        user_id = new_id("usr")
        with self.db.transaction() as tx:
            try:
                tx.execute("INSERT INTO users (id, email, name, password_hash, created_at) VALUES (?,?,?,?,?)", (user_id, email, name, password_hash, now))
            except IntegrityError as err:
                raise Conflict("An account with this email already exists") from err
            if org_name:
                org_id = new_id("org")
                tx.execute("INSERT INTO organizations (id, name, created_at) VALUES (?,?,?)", (org_id, org_name, now))
                tx.execute("INSERT INTO memberships (id, user_id, organization_id, role, created_at) VALUES (?,?,?,?,?)", (new_id("mem"), user_id, org_id, "owner", now))
        return user_id

    def by_email(self, email: str) -> dict | None:
        with self.db.transaction(write=False) as tx:
            return tx.one("SELECT * FROM users WHERE email = ?", (email,))

    def by_id(self, user_id: str) -> dict:
        with self.db.transaction(write=False) as tx:
            row = tx.one("SELECT id, email, name FROM users WHERE id = ?", (user_id,))
        if row is None:
            raise NotFound("User not found")
        return row

    def memberships_of(self, user_id: str) -> list[dict]:
        with self.db.transaction(write=False) as tx:
            return tx.all(
                "SELECT m.id, m.user_id, m.organization_id, o.name AS organization_name, u.email, u.name, m.role FROM memberships m "
                "JOIN organizations o ON o.id = m.organization_id JOIN users u ON u.id = m.user_id WHERE m.user_id = ? ORDER BY m.created_at, m.id",
                (user_id,),
            )

    def members(self, org_id: str) -> list[dict]:
        with self.db.transaction(write=False) as tx:
            return tx.all(
                "SELECT m.id, m.user_id, m.organization_id, o.name AS organization_name, u.email, u.name, m.role FROM memberships m "
                "JOIN organizations o ON o.id = m.organization_id JOIN users u ON u.id = m.user_id WHERE m.organization_id = ? ORDER BY u.email",
                (org_id,),
            )

    def membership(self, org_id: str, membership_id: str) -> dict | None:
        return next((m for m in self.members(org_id) if m["id"] == membership_id), None)

    @staticmethod
    def member_in(tx: Tx, org_id: str, membership_id: str) -> dict | None:
        return tx.one("SELECT * FROM memberships WHERE id = ? AND organization_id = ?", (membership_id, org_id))

    @staticmethod
    def lock_owners(tx: Tx, org_id: str) -> int:
        """Serialise owner changes of one organization (a row lock on PostgreSQL; SQLite writes are serial) and count its owners."""
        tx.execute("UPDATE organizations SET name = name WHERE id = ?", (org_id,))
        row = tx.one("SELECT COUNT(*) AS n FROM memberships WHERE organization_id = ? AND role = 'owner'", (org_id,))
        return int(row["n"]) if row else 0

    def add_member(self, org_id: str, user_id: str, role: str, now: str) -> str:
        """A membership without an invitation: seeding and tests only (the API goes through invitations)."""
        mid = new_id("mem")
        with self.db.transaction() as tx:
            try:
                tx.execute("INSERT INTO memberships (id, user_id, organization_id, role, created_at) VALUES (?,?,?,?,?)", (mid, user_id, org_id, role, now))
            except IntegrityError as err:
                raise Conflict("This user is already a member of the organization") from err
        return mid

class UserService:
    """Accounts, sign-in and memberships; sessions are delegated to SessionService."""

    def __init__(self, store: UserStore, hasher: PasswordHasher, sessions: SessionService, clock: Clock, audit: AuditLog) -> None:
        self.store = store
        self.hasher = hasher
        self.sessions = sessions
        self.clock = clock
        self.audit = audit

    def sign_up(self, body: SignUpIn) -> tuple[str, str, str]:
        user_id = self.store.create(body.email.lower(), body.name, self.hasher.hash(body.password), body.organization_name, self.clock.iso())
        log.info("user signed up user=%s", user_id)
        org = self.sessions.store.first_organization(user_id)
        sid, csrf = self.sessions.start(user_id, org)
        return user_id, sid, csrf

    def sign_in(self, email: str, password: str, previous: AuthContext | None) -> tuple[str, str, str]:
        user = self.store.by_email(email.lower())
        if not self.hasher.verify(password, user["password_hash"] if user else None) or user is None:
            log.info("sign-in refused email_known=%s", user is not None)
            raise AuthenticationRequired("Invalid email or password")
        if previous is not None:
            self.sessions.revoke(previous)  # a new id at sign-in: no session fixation
        org = self.sessions.store.first_organization(user["id"])
        sid, csrf = self.sessions.start(user["id"], org)
        return user["id"], sid, csrf

    def switch(self, auth: AuthContext, org_id: str) -> tuple[str, str]:
        if self.sessions.store.role(auth.user_id, org_id) is None:
            raise NotFound("Organization not found")
        return self.sessions.rotate(auth, org_id)

    def _member(self, auth: AuthContext, membership_id: str) -> dict:
        found = self.store.membership(auth.organization_id or "", membership_id)
        if found is None:
            raise NotFound("Membership not found")
        return found

    def _locked_member(self, tx: Tx, auth: AuthContext, membership_id: str) -> tuple[int, dict]:
        """(owner count, membership) with the organization's owner changes serialised; only owners touch an owner."""
        owners = self.store.lock_owners(tx, auth.organization_id or "")
        member = self.store.member_in(tx, auth.organization_id or "", membership_id)
        if member is None:
            raise NotFound("Membership not found")
        self._check_grant(auth, member["role"])
        return owners, member

    def change_role(self, auth: AuthContext, membership_id: str, role: str) -> dict:
        """Admins manage every role but owner: they cannot grant it, nor demote (or otherwise change) an owner."""
        org_id = auth.organization_id or ""
        with self.store.db.transaction() as tx:
            owners, member = self._locked_member(tx, auth, membership_id)
            self._check_grant(auth, role)
            if member["role"] == "owner" and role != "owner" and owners <= 1:
                raise BadRequest("The organization must keep at least one owner")
            if role != member["role"]:
                tx.execute("UPDATE memberships SET role = ? WHERE id = ?", (role, membership_id))
                self.audit.record(tx, org_id, auth.user_id, "membership.role_changed", membership_id, userId=member["user_id"], **{"from": member["role"], "to": role})
        log.info("membership role changed membership=%s from=%s to=%s by=%s", membership_id, member["role"], role, auth.user_id)
        return self._member(auth, membership_id)

    def remove(self, auth: AuthContext, membership_id: str) -> None:
        org_id = auth.organization_id or ""
        with self.store.db.transaction() as tx:
            owners, member = self._locked_member(tx, auth, membership_id)
            if member["role"] == "owner" and owners <= 1:
                raise BadRequest("The organization must keep at least one owner")
            tx.execute("DELETE FROM memberships WHERE id = ?", (membership_id,))
            self.audit.record(tx, org_id, auth.user_id, "membership.removed", membership_id, userId=member["user_id"], role=member["role"])

    def leave(self, auth: AuthContext, org_id: str) -> None:
        """The caller leaves an organization; the last owner cannot (hand the role on first)."""
        with self.store.db.transaction() as tx:
            owners = self.store.lock_owners(tx, org_id)
            member = tx.one("SELECT * FROM memberships WHERE user_id = ? AND organization_id = ?", (auth.user_id, org_id))
            if member is None:
                raise NotFound("Organization not found")
            if member["role"] == "owner" and owners <= 1:
                raise BadRequest("The last owner cannot leave the organization; make another member owner first")
            tx.execute("DELETE FROM memberships WHERE id = ?", (member["id"],))
            self.audit.record(tx, org_id, auth.user_id, "membership.left", member["id"], userId=auth.user_id, role=member["role"])
        log.info("membership left user=%s organization=%s", auth.user_id, org_id)

    @staticmethod
    def _check_grant(auth: AuthContext, role: str) -> None:
        if role == "owner" and auth.role != "owner":
            raise Forbidden("Only an owner can grant or change the owner role")


def _session_out(service: UserService, user_id: str, csrf: str, org_id: str | None) -> SessionOut:
    """The caller as the API shows it: user, auth (role of the active organization), CSRF token, memberships."""
    user = service.store.by_id(user_id)
    memberships = service.store.memberships_of(user_id)
    role = next((m["role"] for m in memberships if m["organization_id"] == org_id), None)
    return SessionOut(
        user=UserOut(id=user["id"], email=user["email"], name=user["name"]),
        auth=AuthOut(user_id=user_id, organization_id=org_id, role=role),
        csrf_token=csrf,
        memberships=[MembershipOut(**m) for m in memberships],
    )


def routes(service: UserService) -> list:
    """(Endpoint, handler) pairs mounted under /users."""

    def sign_up(call: Call) -> SessionOut:
        user_id, sid, csrf = service.sign_up(call.body)
        service.sessions.set_cookie(bottle.request, bottle.response, sid, csrf)
        return _session_out(service, user_id, csrf, service.sessions.store.first_organization(user_id))

    def sign_in(call: Call) -> SessionOut:
        user_id, sid, csrf = service.sign_in(call.body.email, call.body.password, call.auth)
        service.sessions.set_cookie(bottle.request, bottle.response, sid, csrf)
        return _session_out(service, user_id, csrf, service.sessions.store.first_organization(user_id))

    def sign_out(call: Call) -> None:
        service.sessions.revoke(call.auth)
        service.sessions.clear_cookie(bottle.request, bottle.response)

    def me(call: Call) -> SessionOut:
        return _session_out(service, call.auth.user_id, call.auth.csrf_token, call.auth.organization_id)

    def switch(call: Call) -> SessionOut:
        sid, csrf = service.switch(call.auth, call.body.organization_id)
        service.sessions.set_cookie(bottle.request, bottle.response, sid, csrf)
        return _session_out(service, call.auth.user_id, csrf, call.body.organization_id)

    def list_members(call: Call) -> MembershipList:
        return MembershipList(items=[MembershipOut(**m) for m in service.store.members(call.auth.organization_id)])

    def get_member(call: Call) -> MembershipOut:
        return MembershipOut(**service._member(call.auth, call.params.membership_id))

    def leave(call: Call) -> None:
        service.leave(call.auth, call.body.organization_id)

    def audit(call: Call) -> AuditList:
        return AuditList(items=[AuditEventOut(**e) for e in service.audit.events(call.auth.organization_id, call.query.limit, call.query.offset)])

    def put_member(call: Call) -> MembershipOut:
        return MembershipOut(**service.change_role(call.auth, call.params.membership_id, call.body.role))

    def patch_member(call: Call) -> MembershipOut:
        if call.body.role is None:
            return MembershipOut(**service._member(call.auth, call.params.membership_id))
        return MembershipOut(**service.change_role(call.auth, call.params.membership_id, call.body.role))

    def delete_member(call: Call) -> None:
        service.remove(call.auth, call.params.membership_id)

    P = MembershipParams
    return [
        (Endpoint("POST", "/sign-up", "Create an account (and optionally a hotel organization it owns)", Access.PUBLIC, body=SignUpIn, response=SessionOut, status=201), sign_up),
        (Endpoint("POST", "/sign-in", "Sign in; sets the session cookie (new id every time)", Access.PUBLIC, body=SignInIn, response=SessionOut), sign_in),
        (Endpoint("POST", "/sign-out", "Revoke the current session", Access.AUTH, status=204), sign_out),
        (Endpoint("GET", "/me", "The caller: user, auth (userId, organizationId, role), CSRF token, memberships", Access.AUTH, response=SessionOut), me),
        (Endpoint("POST", "/switch-organization", "Make another membership's organization active (rotates the session)", Access.AUTH, body=SwitchOrganizationIn, response=SessionOut), switch),
        (Endpoint("GET", "/memberships", "Members of the active organization", Access.ADMIN, response=MembershipList), list_members),
        (Endpoint("GET", "/memberships/<membership_id>", "One membership", Access.ADMIN, params=P, response=MembershipOut), get_member),
        (Endpoint("POST", "/memberships/leave", "Leave an organization (the last owner cannot)", Access.AUTH, body=LeaveIn, status=204), leave),
        (Endpoint("GET", "/audit", "The organization's audit trail of invitations and memberships, newest first", Access.ADMIN, query=AuditQuery, response=AuditList), audit),
        (Endpoint("PUT", "/memberships/<membership_id>", "Replace a membership (its role)", Access.ADMIN, params=P, body=MembershipPut, response=MembershipOut), put_member),
        (Endpoint("PATCH", "/memberships/<membership_id>", "Change a membership's role", Access.ADMIN, params=P, body=MembershipPatch, response=MembershipOut), patch_member),
        (Endpoint("DELETE", "/memberships/<membership_id>", "Remove a member", Access.ADMIN, params=P, status=204), delete_member),
    ]
