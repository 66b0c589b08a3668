CREATE TABLE jobs (
    id INTEGER PRIMARY KEY,
    grp TEXT NOT NULL,
    locked_until TEXT,
    payload TEXT NOT NULL
);
CREATE INDEX jobs_claim ON jobs (grp, id);

CREATE TABLE job_pauses (
    queue TEXT,
    paused_group INTEGER,
    paused_by TEXT NOT NULL
);
