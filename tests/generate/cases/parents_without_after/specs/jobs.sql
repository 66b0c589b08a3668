CREATE TABLE jobs (
    id INTEGER PRIMARY KEY,
    locked_until TEXT,
    parents INTEGER NOT NULL DEFAULT 0,
    payload TEXT NOT NULL
);
