-- Finished rows are kept, and the claim index holds them too.
CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    queue TEXT NOT NULL,
    priority SMALLINT NOT NULL DEFAULT 0,
    retry_after TIMESTAMPTZ NOT NULL DEFAULT now(),
    processed_at TIMESTAMPTZ,
    payload JSONB NOT NULL
);
CREATE INDEX jobs_claim ON jobs (queue, priority, retry_after, id);
