CREATE TABLE jobs (
    id INTEGER PRIMARY KEY,
    locked_until TEXT NULL,
    payload TEXT NOT NULL
) PARTITION BY HASH (id);
