CREATE TABLE jobs (
    id INTEGER PRIMARY KEY,
    "Group" TEXT NOT NULL,
    retry_after TEXT NOT NULL,
    processed_at TEXT,
    locked_until TEXT,
    payload BLOB NOT NULL
);
CREATE INDEX jobs_claim ON jobs ("Group", retry_after, id);
