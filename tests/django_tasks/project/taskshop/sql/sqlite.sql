CREATE TABLE task_jobs (
    id INTEGER PRIMARY KEY,
    queue TEXT NOT NULL,
    priority INTEGER NOT NULL,
    run_after TEXT NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 1,
    finished_at TEXT,
    locked_until TEXT,
    last_error TEXT,
    return_value TEXT,
    payload TEXT NOT NULL
);
CREATE INDEX task_jobs_claim ON task_jobs (queue, priority, run_after, id)
    WHERE finished_at IS NULL;

CREATE TABLE task_jobs_dead (
    id INTEGER PRIMARY KEY,
    queue TEXT NOT NULL,
    priority INTEGER NOT NULL,
    run_after TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    finished_at TEXT,
    locked_until TEXT,
    last_error TEXT,
    return_value TEXT,
    payload TEXT NOT NULL
);
