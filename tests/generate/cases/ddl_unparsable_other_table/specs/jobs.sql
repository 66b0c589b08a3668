CREATE TABLE jobs (
    id INTEGER PRIMARY KEY,
    locked_until TEXT,
    payload BLOB NOT NULL
);

-- Not a queue table: a warning at most.
CREATE TABLE jobs_archive (
    id INTEGER PRIMARY KEY ON CONFLICT REPLACE,
    payload BLOB NOT NULL
);
