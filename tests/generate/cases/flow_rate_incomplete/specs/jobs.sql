CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    locked_until TIMESTAMPTZ,
    payload JSONB NOT NULL
);
CREATE TABLE job_claims (
    queue TEXT,
    claimed_at TIMESTAMP NOT NULL,
    worker TEXT NOT NULL
);
