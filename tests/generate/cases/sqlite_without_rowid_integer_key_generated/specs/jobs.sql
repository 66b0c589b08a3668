-- In a WITHOUT ROWID table INTEGER PRIMARY KEY is an ordinary column: SQLite fills nothing.
CREATE TABLE jobs (
    id INTEGER PRIMARY KEY,
    locked_until TEXT,
    payload BLOB NOT NULL
) WITHOUT ROWID;
