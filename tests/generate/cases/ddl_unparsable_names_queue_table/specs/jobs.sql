-- The queue.
CREATE TABLE jobs (
    id INTEGER PRIMARY KEY ON CONFLICT REPLACE,
    locked_until TEXT,
    payload BLOB NOT NULL
);
