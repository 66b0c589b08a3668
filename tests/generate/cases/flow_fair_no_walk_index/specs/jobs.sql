CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    tenant TEXT NOT NULL,
    note TEXT NOT NULL,
    meta JSONB NOT NULL DEFAULT '{}',
    locked_until TIMESTAMPTZ,
    payload JSONB NOT NULL
);
CREATE INDEX jobs_in_work ON jobs (locked_until);
CREATE INDEX jobs_tenant ON jobs (tenant);
