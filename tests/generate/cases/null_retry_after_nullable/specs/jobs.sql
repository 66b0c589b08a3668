CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    attempt INTEGER NOT NULL DEFAULT 0,
    retry_after TIMESTAMPTZ,
    payload JSONB NOT NULL
);
CREATE INDEX jobs_claim ON jobs (retry_after, id);
