CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    tenant TEXT NOT NULL,
    locked_until TIMESTAMPTZ,
    payload JSONB NOT NULL
);
CREATE INDEX jobs_in_work ON jobs (locked_until);
CREATE INDEX jobs_tenant_in_work ON jobs (tenant, locked_until);
CREATE TABLE tenant_weights (
    queue TEXT NOT NULL,
    fair_key TEXT NOT NULL,
    weight INTEGER NOT NULL,
    PRIMARY KEY (queue, fair_key)
);
