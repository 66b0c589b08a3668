CREATE TABLE jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    attempt INTEGER NOT NULL DEFAULT 0,
    payload TEXT NOT NULL
);
CREATE TABLE queue_claims (
    queue TEXT NOT NULL,
    claimed_at TEXT NOT NULL
);
