-- History rows get ids SQLite never hands out twice (AUTOINCREMENT). The cluster's manager sends triage to
-- the analyzers from the last history id it sent; a plain rowid is handed out again once the newest row is
-- deleted (retention or an alert's removal), and the change written under it would never be sent.
-- The rows keep their rowids as ids, so a cursor taken before the upgrade stays right.
CREATE TABLE alert_history_new (id INTEGER PRIMARY KEY AUTOINCREMENT, alert_id TEXT NOT NULL, at REAL NOT NULL,
    actor TEXT NOT NULL, from_status TEXT NOT NULL, to_status TEXT NOT NULL, note TEXT NOT NULL);
INSERT INTO alert_history_new (id, alert_id, at, actor, from_status, to_status, note)
    SELECT rowid, alert_id, at, actor, from_status, to_status, note FROM alert_history ORDER BY rowid;
DROP TABLE alert_history;
ALTER TABLE alert_history_new RENAME TO alert_history;
CREATE INDEX IF NOT EXISTS alert_history_alert ON alert_history (alert_id, at);
