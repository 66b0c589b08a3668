-- The benchmark's queue tables: one per claim form, same columns as the peers' workloads need.
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
