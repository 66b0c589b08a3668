CREATE TABLE jobs (
    id INTEGER NOT NULL PRIMARY KEY,
    due TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    "lease:until" TEXT,
    done_at TEXT DEFAULT NULL,
    payload TEXT NOT NULL
);
