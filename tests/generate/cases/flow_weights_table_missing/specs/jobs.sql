CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    tenant TEXT NOT NULL,
    locked_until TIMESTAMPTZ,
    payload JSONB NOT NULL
);
CREATE INDEX jobs_tenant ON jobs (tenant, id);
