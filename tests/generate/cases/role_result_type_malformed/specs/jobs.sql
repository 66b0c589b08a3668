CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    processed_at TIMESTAMPTZ NULL,
    result JSONB NULL,
    body TEXT NOT NULL
);
CREATE INDEX jobs_claim ON jobs (id) WHERE processed_at IS NULL;
