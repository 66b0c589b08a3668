CREATE TABLE pg_limited_jobs (
    id BIGSERIAL PRIMARY KEY,
    tenant TEXT NOT NULL,
    priority INTEGER NOT NULL DEFAULT 0,
    retry_after TIMESTAMPTZ NOT NULL DEFAULT now(),
    locked_until TIMESTAMPTZ,
    attempt INTEGER NOT NULL DEFAULT 0,
    payload JSONB NOT NULL
) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
        autovacuum_vacuum_insert_scale_factor = 0);
CREATE INDEX pg_limited_jobs_claim ON pg_limited_jobs (priority, retry_after, id);
CREATE INDEX pg_limited_jobs_in_work ON pg_limited_jobs (locked_until);
CREATE INDEX pg_limited_jobs_tenant ON pg_limited_jobs (tenant, locked_until);
CREATE INDEX pg_limited_jobs_walk ON pg_limited_jobs (tenant, priority, retry_after, id);
CREATE TABLE pg_limited_dead (
    id BIGINT PRIMARY KEY,
    tenant TEXT NOT NULL,
    priority INTEGER NOT NULL,
    retry_after TIMESTAMPTZ NOT NULL,
    locked_until TIMESTAMPTZ,
    attempt INTEGER NOT NULL,
    payload JSONB NOT NULL
);
CREATE TABLE queue_claims (
    queue TEXT NOT NULL,
    claimed_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX queue_claims_window ON queue_claims (queue, claimed_at);
CREATE TABLE pg_seated_jobs (
    id BIGSERIAL PRIMARY KEY,
    priority INTEGER NOT NULL DEFAULT 0,
    attempt INTEGER NOT NULL DEFAULT 0,
    payload JSONB NOT NULL
) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
        autovacuum_vacuum_insert_scale_factor = 0);
CREATE INDEX pg_seated_jobs_claim ON pg_seated_jobs (priority, id);
