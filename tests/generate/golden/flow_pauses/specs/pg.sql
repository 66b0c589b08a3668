CREATE TABLE pg_paused_jobs (
    id BIGSERIAL PRIMARY KEY,
    grp TEXT NOT NULL,
    priority INTEGER NOT NULL DEFAULT 0,
    retry_after TIMESTAMPTZ NOT NULL DEFAULT now(),
    attempt INTEGER NOT NULL DEFAULT 1,
    payload JSONB NOT NULL
) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
        autovacuum_vacuum_insert_scale_factor = 0);
CREATE INDEX pg_paused_jobs_claim ON pg_paused_jobs (grp, priority, retry_after, id);
CREATE TABLE queue_pauses (
    queue TEXT NOT NULL,
    paused_group TEXT,
    paused_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
