CREATE TABLE jobs (
    id INTEGER PRIMARY KEY,
    locked_until TEXT,
    payload TEXT NOT NULL
);
CREATE TABLE job_after (
    job_id INTEGER NOT NULL,
    after_id INTEGER NOT NULL,
    on_failure TEXT NOT NULL,
    PRIMARY KEY (job_id, after_id)
);
