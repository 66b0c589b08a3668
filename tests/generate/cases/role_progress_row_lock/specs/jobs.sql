CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    attempt INTEGER NOT NULL DEFAULT 0,
    progress JSONB,
    payload JSONB NOT NULL
);
