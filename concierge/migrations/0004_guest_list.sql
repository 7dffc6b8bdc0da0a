-- The guest list: a per-organization version of its guests (bumped by every write to guests, in the same
-- transaction) so page totals are counted again only after a change; each guest's list entry stored as
-- JSON, refreshed by every write to the guest (NULL: encoded on read); and an index in the list's full
-- order (the old one lacked the id tie-breaker, so every page sorted in a temporary B-tree).
ALTER TABLE organizations ADD COLUMN guests_version INTEGER NOT NULL DEFAULT 0;
ALTER TABLE guests ADD COLUMN list_json TEXT;
CREATE INDEX guests_org_order ON guests (organization_id, last_name, first_name, id);
DROP INDEX guests_org_name
