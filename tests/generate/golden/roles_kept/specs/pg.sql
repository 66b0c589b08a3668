CREATE TABLE pg_error_jobs (
    id BIGSERIAL PRIMARY KEY,
    priority SMALLINT NOT NULL DEFAULT 0,
    retry_after TIMESTAMPTZ NOT NULL DEFAULT now(),
    attempt INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    payload JSONB NOT NULL
) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
        autovacuum_vacuum_insert_scale_factor = 0);
CREATE INDEX pg_error_jobs_claim ON pg_error_jobs (priority, retry_after, id);
CREATE TABLE pg_error_jobs_dead (LIKE pg_error_jobs);

CREATE TABLE pg_error_groups (
    id BIGSERIAL PRIMARY KEY,
    queue TEXT NOT NULL,
    locked_until TIMESTAMPTZ,
    processed_at TIMESTAMPTZ,
    attempt INTEGER NOT NULL DEFAULT 0,
    failure VARCHAR(500),
    outcome JSONB,
    progress JSONB,
    payload BYTEA NOT NULL
) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
        autovacuum_vacuum_insert_scale_factor = 0);
CREATE INDEX pg_error_groups_claim ON pg_error_groups (queue, id) WHERE processed_at IS NULL;
