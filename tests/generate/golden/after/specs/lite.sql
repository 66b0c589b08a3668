CREATE TABLE lite_after_jobs (
    id INTEGER PRIMARY KEY,
    grp TEXT NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 0,
    locked_until TEXT,
    parents INTEGER NOT NULL DEFAULT 0,
    payload TEXT NOT NULL
);
CREATE INDEX lite_after_jobs_claim ON lite_after_jobs (grp, id);
CREATE TABLE lite_job_after (
    job_id INTEGER NOT NULL,
    after_id INTEGER NOT NULL,
    on_failure TEXT NOT NULL,
    PRIMARY KEY (job_id, after_id)
);
