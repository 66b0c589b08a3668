CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    retry_after INTEGER NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 0,
    payload JSONB NOT NULL
);
CREATE INDEX jobs_claim ON jobs (retry_after, id);
