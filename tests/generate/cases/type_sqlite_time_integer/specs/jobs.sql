CREATE TABLE jobs (
    id INTEGER PRIMARY KEY,
    locked_until INTEGER,
    payload BLOB NOT NULL
);
