-- Single-use enrollment tokens (hashed) and the certificates issued with them, bound to one machine.
CREATE TABLE IF NOT EXISTS tokens (
    token_hash TEXT PRIMARY KEY,
    prefix     TEXT NOT NULL,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    used_at    REAL,
    used_by    TEXT,
    used_os    TEXT
);
CREATE TABLE IF NOT EXISTS certificates (
    fingerprint   TEXT PRIMARY KEY,
    serial        TEXT NOT NULL,
    common_name   TEXT NOT NULL,
    enrolled      INTEGER NOT NULL,
    token_prefix  TEXT,
    os            TEXT,
    issued_at     REAL,
    not_after     REAL,
    cert_pem      TEXT,
    machine_id    TEXT,
    agent_id      TEXT,
    bound_at      REAL,
    revoked_at    REAL,
    revoke_reason TEXT
);
CREATE INDEX IF NOT EXISTS certificates_agent ON certificates(agent_id);
CREATE INDEX IF NOT EXISTS certificates_machine ON certificates(machine_id);
