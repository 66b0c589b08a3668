-- The benchmark's queue tables: one per claim form, same columns as the peers' workloads need,
-- with the claim index and the storage settings `inboxgen build` asks for.
CREATE TABLE bench_row_lock (
    id BIGSERIAL PRIMARY KEY,
    attempt INTEGER NOT NULL DEFAULT 0,
    processed_at TIMESTAMPTZ,
    payload JSONB NOT NULL
);
CREATE INDEX bench_row_lock_ready ON bench_row_lock (id) WHERE processed_at IS NULL;

CREATE TABLE bench_lease (
    id BIGSERIAL PRIMARY KEY,
    attempt INTEGER NOT NULL DEFAULT 0,
    locked_until TIMESTAMPTZ,
    processed_at TIMESTAMPTZ,
    payload JSONB NOT NULL
);
CREATE INDEX bench_lease_ready ON bench_lease (id) WHERE processed_at IS NULL;

-- Row lock counting every claim (max_attempts and a dead-letter group): one group, "jobs".
CREATE TABLE bench_row_lock_counted (
    id BIGSERIAL PRIMARY KEY,
    queue TEXT NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 1,
    processed_at TIMESTAMPTZ,
    payload JSONB NOT NULL
);
CREATE INDEX bench_row_lock_counted_ready ON bench_row_lock_counted (queue, id)
    WHERE processed_at IS NULL;

ALTER TABLE bench_row_lock SET (fillfactor = 50, autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 5000, autovacuum_vacuum_insert_scale_factor = 0);
ALTER TABLE bench_lease SET (fillfactor = 50, autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 5000, autovacuum_vacuum_insert_scale_factor = 0);
ALTER TABLE bench_row_lock_counted SET (fillfactor = 50, autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 5000, autovacuum_vacuum_insert_scale_factor = 0);
