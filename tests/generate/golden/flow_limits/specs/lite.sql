CREATE TABLE lite_limited_jobs (
    id INTEGER PRIMARY KEY,
    user_id INTEGER NOT NULL,
    retry_after TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    locked_until TEXT,
    attempt INTEGER NOT NULL DEFAULT 0,
    payload TEXT NOT NULL
);
CREATE INDEX lite_limited_jobs_claim ON lite_limited_jobs (retry_after, id);
CREATE INDEX lite_limited_jobs_in_work ON lite_limited_jobs (locked_until);
CREATE INDEX lite_limited_jobs_user ON lite_limited_jobs (user_id, locked_until);
CREATE TABLE queue_claims (
    queue TEXT NOT NULL,
    claimed_at TEXT NOT NULL
);
CREATE INDEX queue_claims_window ON queue_claims (queue, claimed_at);
CREATE TABLE lite_seated_jobs (
    id INTEGER PRIMARY KEY,
    image_path TEXT NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 0,
    payload TEXT NOT NULL
);
