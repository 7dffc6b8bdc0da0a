-- The console's accounts (passwords hashed with scrypt).
CREATE TABLE IF NOT EXISTS users (username TEXT PRIMARY KEY, role TEXT NOT NULL, password TEXT NOT NULL,
    disabled INTEGER NOT NULL DEFAULT 0, created_at REAL NOT NULL, last_login REAL);
