-- Alerts, exclusions and the analysis config, as the appliance created them before migrations existed.
CREATE TABLE IF NOT EXISTS alerts (id TEXT PRIMARY KEY, agent_id TEXT NOT NULL, indicator TEXT NOT NULL,
    category TEXT NOT NULL, severity INTEGER NOT NULL, confidence REAL NOT NULL, summary TEXT NOT NULL,
    first_ns INTEGER NOT NULL, last_ns INTEGER NOT NULL, status TEXT NOT NULL, detections TEXT NOT NULL,
    detection_count INTEGER NOT NULL, created_at REAL NOT NULL, updated_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS alerts_group ON alerts (agent_id, indicator, status);
CREATE INDEX IF NOT EXISTS alerts_last ON alerts (last_ns);
CREATE TABLE IF NOT EXISTS exclusions (id TEXT PRIMARY KEY, value TEXT NOT NULL, kind TEXT NOT NULL,
    protocol TEXT NOT NULL, agent_id TEXT, comment TEXT NOT NULL, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS analysis_config (id INTEGER PRIMARY KEY CHECK (id = 1), body TEXT NOT NULL);
