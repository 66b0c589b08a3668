-- STRICT and WITHOUT ROWID together: the id is the caller's to give.
CREATE TABLE jobs (
    id INTEGER NOT NULL,
    locked_until TEXT,
    payload BLOB NOT NULL,
    PRIMARY KEY (id)
) STRICT, WITHOUT ROWID;
