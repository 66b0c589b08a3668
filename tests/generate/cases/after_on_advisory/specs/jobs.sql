CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    grp TEXT NOT NULL,
    account TEXT NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 0,
    parents INTEGER NOT NULL DEFAULT 0,
    payload JSONB NOT NULL
);
CREATE TABLE job_after (
    job_id BIGINT NOT NULL,
    after_id BIGINT NOT NULL,
    on_failure TEXT NOT NULL,
    PRIMARY KEY (job_id, after_id)
);
