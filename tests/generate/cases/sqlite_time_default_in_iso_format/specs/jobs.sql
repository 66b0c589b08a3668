CREATE TABLE jobs (
    id INTEGER NOT NULL PRIMARY KEY,
    due TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    locked_until TEXT,
    payload TEXT NOT NULL
);
