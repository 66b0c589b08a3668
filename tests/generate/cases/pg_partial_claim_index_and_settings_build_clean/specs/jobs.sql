CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    queue TEXT NOT NULL,
    priority SMALLINT NOT NULL DEFAULT 0,
    retry_after TIMESTAMPTZ NOT NULL DEFAULT now(),
    processed_at TIMESTAMPTZ,
    payload JSONB NOT NULL
) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0);
ALTER TABLE jobs SET (autovacuum_vacuum_threshold = 2000,
                      autovacuum_vacuum_insert_scale_factor = 0);
CREATE INDEX jobs_claim ON jobs (queue, priority, retry_after, id)
    WHERE (processed_at IS NULL);
