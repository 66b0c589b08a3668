-- Both spellings alias SQLite's rowid, which SQLite fills.
CREATE TABLE jobs (
    id INTEGER NOT NULL PRIMARY KEY,
    locked_until TEXT,
    payload BLOB NOT NULL
);
CREATE TABLE other_jobs (
    id INTEGER NOT NULL,
    locked_until TEXT,
    payload BLOB NOT NULL,
    PRIMARY KEY (id)
);
