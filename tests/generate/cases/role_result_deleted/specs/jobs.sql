CREATE TABLE jobs (
    id INTEGER PRIMARY KEY,
    locked_until TEXT,
    result TEXT,
    payload TEXT NOT NULL
);
