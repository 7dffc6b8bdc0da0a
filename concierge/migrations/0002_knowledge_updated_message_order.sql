-- Knowledge entries are editable (PUT/PATCH) like every other resource; chat messages get an explicit
-- per-thread order (timestamps collide within a millisecond).
ALTER TABLE knowledge ADD COLUMN updated_at TEXT NOT NULL DEFAULT '';
ALTER TABLE chat_messages ADD COLUMN seq INTEGER NOT NULL DEFAULT 0
