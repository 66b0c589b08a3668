CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    tenant TEXT NOT NULL,
    locked_until TIMESTAMPTZ,
    payload JSONB NOT NULL
);
CREATE TABLE job_claims (
    queue TEXT NOT NULL,
    claimed_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX job_claims_window ON job_claims (queue, claimed_at);
