CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    tenant TEXT NOT NULL,
    locked_until TIMESTAMPTZ,
    payload JSONB NOT NULL
) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
        autovacuum_vacuum_insert_scale_factor = 0);
-- An index on the key alone: each count would read every row of the key.
CREATE INDEX jobs_tenant ON jobs (tenant);
