CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    attempt INTEGER NOT NULL DEFAULT 0,
    payload JSONB NOT NULL
);

-- Spent jobs, with the same columns as the queue.
CREATE TABLE jobs_dead (LIKE jobs INCLUDING ALL);
