CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    queue TEXT NOT NULL,
    payload JSONB NOT NULL
);
CREATE INDEX jobs_claim ON jobs (queue, id);
