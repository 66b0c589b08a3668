CREATE TABLE jobs (
    id INTEGER PRIMARY KEY,
    tenant TEXT NOT NULL,
    locked_until TEXT,
    payload TEXT NOT NULL
);
CREATE INDEX jobs_tenant ON jobs (tenant, id);
CREATE TABLE tenant_weights (
    queue TEXT NOT NULL,
    fair_key TEXT NOT NULL,
    weight INTEGER NOT NULL
);
