CREATE TABLE pg_fair_jobs (
    id BIGSERIAL PRIMARY KEY,
    tenant TEXT NOT NULL,
    priority INTEGER NOT NULL DEFAULT 0,
    retry_after TIMESTAMPTZ NOT NULL DEFAULT now(),
    locked_until TIMESTAMPTZ,
    attempt INTEGER NOT NULL DEFAULT 0,
    payload JSONB NOT NULL
) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
        autovacuum_vacuum_insert_scale_factor = 0);
CREATE INDEX pg_fair_jobs_claim ON pg_fair_jobs (priority, retry_after, id);
CREATE INDEX pg_fair_jobs_tenant ON pg_fair_jobs (tenant, priority, retry_after, id);
CREATE INDEX pg_fair_jobs_in_work ON pg_fair_jobs (locked_until);
CREATE INDEX pg_fair_jobs_tenant_in_work ON pg_fair_jobs (tenant, locked_until);
CREATE TABLE pg_fair_groups (
    id BIGSERIAL PRIMARY KEY,
    grp TEXT NOT NULL,
    account UUID NOT NULL,
    processed_at TIMESTAMPTZ,
    locked_until TIMESTAMPTZ,
    attempt INTEGER NOT NULL DEFAULT 0,
    payload JSONB NOT NULL
) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
        autovacuum_vacuum_insert_scale_factor = 0);
CREATE INDEX pg_fair_groups_claim ON pg_fair_groups (grp, id) WHERE processed_at IS NULL;
CREATE INDEX pg_fair_groups_account ON pg_fair_groups (grp, account, id)
    WHERE processed_at IS NULL;
CREATE TABLE pg_weighted_jobs (
    id BIGSERIAL PRIMARY KEY,
    tenant TEXT NOT NULL,
    priority INTEGER NOT NULL DEFAULT 0,
    retry_after TIMESTAMPTZ NOT NULL DEFAULT now(),
    locked_until TIMESTAMPTZ,
    attempt INTEGER NOT NULL DEFAULT 0,
    payload JSONB NOT NULL
) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
        autovacuum_vacuum_insert_scale_factor = 0);
CREATE INDEX pg_weighted_jobs_claim ON pg_weighted_jobs (priority, retry_after, id);
CREATE INDEX pg_weighted_jobs_tenant ON pg_weighted_jobs (tenant, priority, retry_after, id);
CREATE TABLE tenant_weights (
    queue TEXT NOT NULL,
    fair_key TEXT NOT NULL,
    weight INTEGER NOT NULL,
    PRIMARY KEY (queue, fair_key)
);
