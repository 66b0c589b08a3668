CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    attempt INTEGER NOT NULL DEFAULT 0,
    payload JSONB NOT NULL
);

CREATE TABLE jobs_dead (
    id BIGINT PRIMARY KEY,
    attempt INTEGER NOT NULL,
    payload TEXT NOT NULL
);
