CREATE TABLE task_jobs (
    id BIGSERIAL PRIMARY KEY,
    queue TEXT NOT NULL,
    priority INTEGER NOT NULL,
    run_after TIMESTAMPTZ NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 1,
    finished_at TIMESTAMPTZ,
    locked_until TIMESTAMPTZ,
    last_error TEXT,
    return_value JSONB,
    payload JSONB NOT NULL
);
ALTER TABLE task_jobs SET (fillfactor = 50, autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 5000, autovacuum_vacuum_insert_scale_factor = 0);
CREATE INDEX task_jobs_claim ON task_jobs (queue, priority, run_after, id)
    WHERE finished_at IS NULL;

CREATE TABLE task_jobs_dead (
    id BIGINT PRIMARY KEY,
    queue TEXT NOT NULL,
    priority INTEGER NOT NULL,
    run_after TIMESTAMPTZ NOT NULL,
    attempt INTEGER NOT NULL,
    finished_at TIMESTAMPTZ,
    locked_until TIMESTAMPTZ,
    last_error TEXT,
    return_value JSONB,
    payload JSONB NOT NULL
);
