CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    attempt INTEGER NOT NULL DEFAULT 0,
    locked_until TIMESTAMPTZ,
    parents INTEGER NOT NULL,
    payload JSONB NOT NULL
);
CREATE TABLE jobs_dead (
    id BIGINT PRIMARY KEY,
    attempt INTEGER NOT NULL DEFAULT 0,
    locked_until TIMESTAMPTZ,
    parents INTEGER NOT NULL,
    payload JSONB NOT NULL
);
CREATE TABLE job_after (
    job_id TEXT NOT NULL,
    after_id BIGINT,
    noted_by TEXT NOT NULL
);
