CREATE TABLE lite_error_jobs (
    id INTEGER PRIMARY KEY,
    account TEXT NOT NULL,
    retry_after TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    error TEXT,
    payload TEXT NOT NULL
);
CREATE INDEX lite_error_jobs_claim ON lite_error_jobs (retry_after, id);

CREATE TABLE lite_result_jobs (
    id INTEGER PRIMARY KEY,
    locked_until TEXT,
    processed_at TEXT,
    result TEXT,
    progress TEXT,
    payload TEXT NOT NULL
);
CREATE INDEX lite_result_jobs_claim ON lite_result_jobs (id) WHERE processed_at IS NULL;
