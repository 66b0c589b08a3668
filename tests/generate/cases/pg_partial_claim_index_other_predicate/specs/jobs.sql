CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    queue TEXT NOT NULL,
    priority SMALLINT NOT NULL DEFAULT 0,
    retry_after TIMESTAMPTZ NOT NULL DEFAULT now(),
    processed_at TIMESTAMPTZ,
    payload JSONB NOT NULL
) WITH (fillfactor = 80);
CREATE INDEX jobs_claim ON jobs (queue, priority, retry_after, id) WHERE priority < 5;
