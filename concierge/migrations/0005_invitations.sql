-- Memberships by invitation: an admin invites an email address with a role; only an accepted invitation
-- creates a membership (no account lookup when inviting, so the answer says nothing about accounts).
-- audit_events records every step of invitations and memberships, in order (seq) per organization.
CREATE TABLE invitations (
    id TEXT PRIMARY KEY,
    organization_id TEXT NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    email TEXT NOT NULL,
    role TEXT NOT NULL,
    status TEXT NOT NULL,
    invited_by TEXT REFERENCES users(id) ON DELETE SET NULL,
    created_at TEXT NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL,
    responded_at TEXT,
    membership_id TEXT
);
CREATE INDEX invitations_email ON invitations (email, status);
CREATE INDEX invitations_org ON invitations (organization_id, status);
CREATE TABLE audit_events (
    id TEXT PRIMARY KEY,
    organization_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    actor_id TEXT,
    action TEXT NOT NULL,
    subject_id TEXT NOT NULL,
    detail TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX audit_events_org ON audit_events (organization_id, seq)
