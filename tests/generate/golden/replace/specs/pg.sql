-- Orders a shop re-sends: one queued job per order and kind, replaced or debounced.
CREATE TABLE pg_replace_jobs (
    id BIGSERIAL PRIMARY KEY,
    order_id BIGINT NOT NULL,
    kind TEXT NOT NULL,
    priority SMALLINT NOT NULL DEFAULT 0,
    retry_after TIMESTAMPTZ NOT NULL DEFAULT now(),
    enqueued_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    attempt INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    payload JSONB NOT NULL,
    UNIQUE (order_id, kind)
) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
        autovacuum_vacuum_insert_scale_factor = 0);
CREATE INDEX pg_replace_jobs_claim ON pg_replace_jobs (priority, retry_after, id);
CREATE TABLE pg_replace_jobs_dead (LIKE pg_replace_jobs);

CREATE TABLE pg_debounce_leases (
    id BIGSERIAL PRIMARY KEY,
    queue TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    retry_after TIMESTAMP NOT NULL,
    enqueued_at TIMESTAMP NOT NULL DEFAULT (now() AT TIME ZONE 'UTC'),
    locked_until TIMESTAMP,
    processed_at TIMESTAMP,
    attempt INTEGER NOT NULL DEFAULT 0,
    payload JSONB NOT NULL
) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
        autovacuum_vacuum_insert_scale_factor = 0);
CREATE UNIQUE INDEX pg_debounce_leases_doc ON pg_debounce_leases (doc_id);
CREATE INDEX pg_debounce_leases_claim ON pg_debounce_leases (queue, retry_after, id)
    WHERE processed_at IS NULL;
