CREATE TABLE pg_after_jobs (
    id BIGSERIAL PRIMARY KEY,
    grp TEXT NOT NULL,
    priority INTEGER NOT NULL DEFAULT 0,
    retry_after TIMESTAMPTZ NOT NULL DEFAULT now(),
    attempt INTEGER NOT NULL DEFAULT 0,
    locked_until TIMESTAMPTZ,
    error TEXT,
    parents INTEGER NOT NULL DEFAULT 0,
    payload JSONB NOT NULL
) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
        autovacuum_vacuum_insert_scale_factor = 0);
CREATE INDEX pg_after_jobs_claim ON pg_after_jobs (grp, priority, retry_after, id);
CREATE TABLE pg_after_dead (
    id BIGINT PRIMARY KEY,
    grp TEXT NOT NULL,
    priority INTEGER NOT NULL,
    retry_after TIMESTAMPTZ NOT NULL,
    attempt INTEGER NOT NULL,
    locked_until TIMESTAMPTZ,
    error TEXT,
    parents INTEGER NOT NULL,
    payload JSONB NOT NULL
);
CREATE TABLE pg_job_after (
    job_id BIGINT NOT NULL,
    after_id BIGINT NOT NULL,
    on_failure TEXT NOT NULL,
    PRIMARY KEY (job_id, after_id)
);
