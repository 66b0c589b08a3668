CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    priority TEXT NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 0,
    payload JSONB NOT NULL
);
CREATE INDEX jobs_claim ON jobs (priority, id);
