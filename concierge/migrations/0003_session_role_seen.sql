-- The role a session was issued for: when the membership's role changes, the session id is rotated.
ALTER TABLE sessions ADD COLUMN role_seen TEXT
