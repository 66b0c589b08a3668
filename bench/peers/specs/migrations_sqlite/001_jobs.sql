-- The benchmark's SQLite queue table: the lease form, as on PostgreSQL.
CREATE TABLE bench_sqlite_lease (
    id INTEGER PRIMARY KEY,
    attempt INTEGER NOT NULL DEFAULT 0,
    locked_until TEXT,
    processed_at TEXT,
    payload TEXT NOT NULL
);
CREATE INDEX bench_sqlite_lease_ready ON bench_sqlite_lease (id) WHERE processed_at IS NULL;
