-- Every SQLite column type of the role table in docs/spec.md, bound to the roles that take it
-- and as data columns, with other declared types (whose values sqlite3 hands back as stored).
CREATE TABLE lite_lease_jobs (
    id INTEGER PRIMARY KEY,
    queue TEXT NOT NULL,
    priority INTEGER NOT NULL DEFAULT 0,
    retry_after TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP,
    attempt INTEGER NOT NULL DEFAULT 1,
    processed_at TEXT,
    locked_until TEXT,
    headers JSON,
    payload BLOB NOT NULL,
    c_integer INTEGER NOT NULL,
    c_int INT,
    c_text TEXT NOT NULL,
    c_varchar VARCHAR(20),
    c_blob BLOB,
    c_json JSON,
    c_real REAL NOT NULL,
    c_numeric NUMERIC,
    c_boolean BOOLEAN,
    c_uuid UUID,
    c_date DATE,
    c_datetime DATETIME
);
CREATE INDEX lite_lease_jobs_claim ON lite_lease_jobs (queue, priority, retry_after, id)
    WHERE processed_at IS NULL;
CREATE UNIQUE INDEX lite_lease_jobs_once ON lite_lease_jobs (c_integer);

CREATE TABLE lite_text_jobs (
    id TEXT NOT NULL PRIMARY KEY,
    queue TEXT NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 1,
    locked_until TEXT,
    headers TEXT,
    payload JSON NOT NULL
);
CREATE INDEX lite_text_jobs_claim ON lite_text_jobs (queue, id);

CREATE TABLE lite_advisory_jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    image TEXT NOT NULL,
    processed_at TEXT,
    payload TEXT NOT NULL
);
CREATE INDEX lite_advisory_jobs_claim ON lite_advisory_jobs (id) WHERE processed_at IS NULL;
