-- Who moved an alert through triage, when, and why (the console records its user here); the console's settings.
CREATE TABLE IF NOT EXISTS alert_history (alert_id TEXT NOT NULL, at REAL NOT NULL, actor TEXT NOT NULL,
    from_status TEXT NOT NULL, to_status TEXT NOT NULL, note TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS alert_history_alert ON alert_history (alert_id, at);
CREATE TABLE IF NOT EXISTS console_settings (id INTEGER PRIMARY KEY CHECK (id = 1), body TEXT NOT NULL);
