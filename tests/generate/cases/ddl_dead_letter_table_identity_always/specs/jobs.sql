CREATE TABLE jobs (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    attempt INTEGER NOT NULL DEFAULT 0,
    payload TEXT NOT NULL
);

-- Copied from jobs, identity and all: a dead letter could not keep its id.
CREATE TABLE jobs_dead (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    attempt INTEGER NOT NULL DEFAULT 0,
    payload TEXT NOT NULL
);
