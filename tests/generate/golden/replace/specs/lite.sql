CREATE TABLE lite_debounce_jobs (
    id INTEGER PRIMARY KEY,
    doc_id TEXT NOT NULL UNIQUE,
    retry_after TEXT NOT NULL,
    enqueued_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    locked_until TEXT,
    processed_at TEXT,
    attempt INTEGER NOT NULL DEFAULT 0,
    payload TEXT NOT NULL
);
CREATE INDEX lite_debounce_jobs_claim ON lite_debounce_jobs (retry_after, id)
    WHERE processed_at IS NULL;
