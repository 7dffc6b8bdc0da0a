"""/users/invitations: how an account joins an organization. An admin invites an email address with a role;
the invitee accepts or declines; invitations expire; only an accepted invitation creates a membership.

Inviting never looks the address up: the answer, the stored record and the mail are the same whether or
not an account exists, so the route tells nobody who has an account (the old `POST /users/memberships`
answered 201 or 404 and added the account without its consent).
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Literal

from concierge.api import Access, Email, Endpoint, Id, OutSchema, QuerySchema, Schema
from concierge.audit import AuditLog
from concierge.clock import Clock, new_id
from concierge.database import Database, IntegrityError, Row, Tx
from concierge.errors import BadRequest, Conflict, Forbidden, InvalidTransition, NotFound
from concierge.mail import Mailer
from concierge.modules.users import MembershipOut, Role, UserStore
from concierge.sessions import AuthContext
from concierge.statemachines import INVITATION

log = logging.getLogger(__name__)

InvitationStatus = Literal["pending", "accepted", "declined", "revoked", "expired"]
MAX_PENDING_PER_ORGANIZATION = 200  # bounds the mail an admin account can make the server send


class InvitationIn(Schema):
    email: Email
    role: Role


class InvitationAction(Schema):
    invitation_id: Id


class InvitationParams(Schema):
    invitation_id: Id


class InvitationsQuery(QuerySchema):
    status: InvitationStatus | None = None


class InvitationOut(OutSchema):
    id: str
    organization_id: str
    organization_name: str
    email: str
    role: Role
    status: InvitationStatus
    created_at: str
    expires_at: str
    responded_at: str | None


class InvitationList(OutSchema):
    items: list[InvitationOut]


SELECT = "SELECT i.*, o.name AS organization_name FROM invitations i JOIN organizations o ON o.id = i.organization_id"


class InvitationService:
    """Invitation life cycle (the `invitation` state machine); every step is audited in its own transaction."""

    def __init__(self, db: Database, users: UserStore, audit: AuditLog, mailer: Mailer, clock: Clock, ttl_seconds: int, public_url: str) -> None:
        self.db = db
        self.users = users
        self.audit = audit
        self.mailer = mailer
        self.clock = clock
        self.ttl = ttl_seconds
        self.public_url = public_url

    def _out(self, row: Row) -> InvitationOut:
        expires = datetime.fromtimestamp(row["expires_at"], timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        return InvitationOut(**{**row, "expires_at": expires})

    def _expire_due(self, tx: Tx, where: str, args: tuple[str, ...]) -> None:
        """Pending invitations past their expiry become `expired` (audited) before anyone reads or acts on them."""
        now = self.clock.now()
        for row in tx.all(f"SELECT id, organization_id, email FROM invitations i WHERE {where} AND status = 'pending' AND expires_at <= ?", (*args, now)):
            if tx.execute("UPDATE invitations SET status = 'expired' WHERE id = ? AND status = 'pending'", (row["id"],)):
                self.audit.record(tx, row["organization_id"], None, "invitation.expired", row["id"], email=row["email"])

    def invite(self, auth: AuthContext, body: InvitationIn) -> InvitationOut:
        org_id = auth.organization_id or ""
        if body.role == "owner" and auth.role != "owner":
            raise Forbidden("Only an owner can grant or change the owner role")
        email = body.email.lower()
        now = self.clock.now()
        with self.db.transaction() as tx:
            self._expire_due(tx, "i.organization_id = ?", (org_id,))
            if tx.one("SELECT 1 AS x FROM memberships m JOIN users u ON u.id = m.user_id WHERE m.organization_id = ? AND u.email = ?", (org_id, email)):
                raise Conflict("This address already belongs to a member of the organization")  # members are visible to admins anyway
            if tx.one("SELECT 1 AS x FROM invitations WHERE organization_id = ? AND email = ? AND status = 'pending'", (org_id, email)):
                raise Conflict("A pending invitation for this address exists; revoke it to invite again")
            pending = tx.one("SELECT COUNT(*) AS n FROM invitations WHERE organization_id = ? AND status = 'pending'", (org_id,))
            if pending and int(pending["n"]) >= MAX_PENDING_PER_ORGANIZATION:
                raise BadRequest(f"At most {MAX_PENDING_PER_ORGANIZATION} pending invitations per organization; revoke some first")
            iid = new_id("inv")
            tx.execute(
                "INSERT INTO invitations (id, organization_id, email, role, status, invited_by, created_at, expires_at) VALUES (?,?,?,?,?,?,?,?)",
                (iid, org_id, email, body.role, INVITATION.initial, auth.user_id, self.clock.iso(), now + self.ttl),
            )
            self.audit.record(tx, org_id, auth.user_id, "invitation.created", iid, email=email, role=body.role)
            row = tx.one(f"{SELECT} WHERE i.id = ?", (iid,))
        assert row is not None
        self.mailer.send(
            email,
            f"You are invited to {row['organization_name']}",
            f"{auth.user.get('name', 'An administrator')} invited you to join {row['organization_name']} as {body.role}.\n\n"
            f"Sign in with this address (or create an account with it) at {self.public_url}, then accept the invitation.\n"
            f"It expires in {self.ttl // 86400 or 1} day(s). If you did not expect it, ignore this message.",
        )
        return self._out(row)

    def of_organization(self, auth: AuthContext, status: str | None) -> list[InvitationOut]:
        org_id = auth.organization_id or ""
        with self.db.transaction() as tx:
            self._expire_due(tx, "i.organization_id = ?", (org_id,))
            sql, args = f"{SELECT} WHERE i.organization_id = ?", [org_id]
            if status:
                sql, args = sql + " AND i.status = ?", args + [status]
            rows = tx.all(sql + " ORDER BY i.created_at DESC, i.id", args)
        return [self._out(r) for r in rows]

    def one(self, auth: AuthContext, invitation_id: str) -> InvitationOut:
        with self.db.transaction() as tx:
            self._expire_due(tx, "i.id = ?", (invitation_id,))
            row = tx.one(f"{SELECT} WHERE i.id = ? AND i.organization_id = ?", (invitation_id, auth.organization_id or ""))
        if row is None:
            raise NotFound("Invitation not found")
        return self._out(row)

    def received(self, auth: AuthContext) -> list[InvitationOut]:
        """Pending invitations addressed to the caller's email, in every organization."""
        email = str(auth.user.get("email", "")).lower()
        with self.db.transaction() as tx:
            self._expire_due(tx, "i.email = ?", (email,))
            rows = tx.all(f"{SELECT} WHERE i.email = ? AND i.status = 'pending' ORDER BY i.created_at DESC, i.id", (email,))
        return [self._out(r) for r in rows]

    def _move(self, tx: Tx, row: Row, target: str) -> None:
        """pending -> target exactly once, even under concurrent requests (conditional update)."""
        INVITATION.check(row["status"], target)
        if not tx.execute("UPDATE invitations SET status = ?, responded_at = ? WHERE id = ? AND status = 'pending'", (target, self.clock.iso(), row["id"])):
            current = tx.one("SELECT status FROM invitations WHERE id = ?", (row["id"],))
            raise InvalidTransition(INVITATION.name, current["status"] if current else row["status"], target)

    def _addressed_to(self, tx: Tx, auth: AuthContext, invitation_id: str) -> Row:
        """The invitation, if it is addressed to the caller; anyone else's is 404 (no existence leak)."""
        self._expire_due(tx, "i.id = ?", (invitation_id,))
        row = tx.one(f"{SELECT} WHERE i.id = ? AND i.email = ?", (invitation_id, str(auth.user.get("email", "")).lower()))
        if row is None:
            raise NotFound("Invitation not found")
        return row

    def accept(self, auth: AuthContext, invitation_id: str) -> MembershipOut:
        mid = new_id("mem")
        with self.db.transaction() as tx:
            row = self._addressed_to(tx, auth, invitation_id)
            if row["status"] != "expired":  # an expiry just recorded must stay recorded: refused after the commit
                self._move(tx, row, "accepted")
                try:
                    tx.execute(
                        "INSERT INTO memberships (id, user_id, organization_id, role, created_at) VALUES (?,?,?,?,?)",
                        (mid, auth.user_id, row["organization_id"], row["role"], self.clock.iso()),
                    )
                except IntegrityError as err:
                    raise Conflict("You are already a member of this organization") from err
                tx.execute("UPDATE invitations SET membership_id = ? WHERE id = ?", (mid, invitation_id))
                self.audit.record(tx, row["organization_id"], auth.user_id, "invitation.accepted", invitation_id, membershipId=mid)
                self.audit.record(tx, row["organization_id"], auth.user_id, "membership.created", mid, userId=auth.user_id, role=row["role"], invitationId=invitation_id)
        if row["status"] == "expired":
            raise InvalidTransition(INVITATION.name, "expired", "accepted")
        log.info("invitation accepted invitation=%s user=%s membership=%s", invitation_id, auth.user_id, mid)
        member = next(m for m in self.users.memberships_of(auth.user_id) if m["id"] == mid)
        return MembershipOut(**member)

    def decline(self, auth: AuthContext, invitation_id: str) -> InvitationOut:
        with self.db.transaction() as tx:
            row = self._addressed_to(tx, auth, invitation_id)
            if row["status"] != "expired":
                self._move(tx, row, "declined")
                self.audit.record(tx, row["organization_id"], auth.user_id, "invitation.declined", invitation_id)
        if row["status"] == "expired":
            raise InvalidTransition(INVITATION.name, "expired", "declined")
        return self._reread(invitation_id)

    def revoke(self, auth: AuthContext, invitation_id: str) -> InvitationOut:
        org_id = auth.organization_id or ""
        with self.db.transaction() as tx:
            self._expire_due(tx, "i.id = ?", (invitation_id,))
            row = tx.one(f"{SELECT} WHERE i.id = ? AND i.organization_id = ?", (invitation_id, org_id))
            if row is None:
                raise NotFound("Invitation not found")
            if row["role"] == "owner" and auth.role != "owner":
                raise Forbidden("Only an owner can grant or change the owner role")
            if row["status"] != "expired":
                self._move(tx, row, "revoked")
                self.audit.record(tx, org_id, auth.user_id, "invitation.revoked", invitation_id, email=row["email"])
        if row["status"] == "expired":
            raise InvalidTransition(INVITATION.name, "expired", "revoked")
        return self._reread(invitation_id)

    def _reread(self, invitation_id: str) -> InvitationOut:
        with self.db.transaction(write=False) as tx:
            row = tx.one(f"{SELECT} WHERE i.id = ?", (invitation_id,))
        assert row is not None
        return self._out(row)


def routes(service: InvitationService) -> list:
    """(Endpoint, handler) pairs mounted under /users."""
    A, ADMIN = Access.AUTH, Access.ADMIN
    return [
        (Endpoint("GET", "/invitations", "Invitations of the active organization (all states; filter by status)", ADMIN, query=InvitationsQuery, response=InvitationList),
         lambda c: InvitationList(items=service.of_organization(c.auth, c.query.status))),
        (Endpoint("GET", "/invitations/<invitation_id>", "One invitation of the active organization", ADMIN, params=InvitationParams, response=InvitationOut),
         lambda c: service.one(c.auth, c.params.invitation_id)),
        (Endpoint("POST", "/invitations", "Invite an email address with a role (same answer whether or not an account exists); mails the address", ADMIN, body=InvitationIn, response=InvitationOut, status=201),
         lambda c: service.invite(c.auth, c.body)),
        (Endpoint("POST", "/invitations/revoke", "Withdraw a pending invitation", ADMIN, body=InvitationAction, response=InvitationOut),
         lambda c: service.revoke(c.auth, c.body.invitation_id)),
        (Endpoint("GET", "/received-invitations", "Pending invitations addressed to the caller's email", A, response=InvitationList),
         lambda c: InvitationList(items=service.received(c.auth))),
        (Endpoint("POST", "/invitations/accept", "Accept an invitation addressed to the caller: creates the membership", A, body=InvitationAction, response=MembershipOut),
         lambda c: service.accept(c.auth, c.body.invitation_id)),
        (Endpoint("POST", "/invitations/decline", "Decline an invitation addressed to the caller", A, body=InvitationAction, response=InvitationOut),
         lambda c: service.decline(c.auth, c.body.invitation_id)),
    ]
