CREATE TABLE jobs (
    id INTEGER PRIMARY KEY,
    doc_id TEXT NOT NULL UNIQUE,
    retry_after TEXT NOT NULL,
    locked_until TEXT,
    enqueued_at TEXT DEFAULT CURRENT_TIMESTAMP,
    payload TEXT NOT NULL
);
