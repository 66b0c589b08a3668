-- migrate:up
CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    attempt INTEGER NOT NULL DEFAULT 0,
    body JSONB NOT NULL
);
ALTER TABLE jobs RENAME COLUMN body TO payload;

-- migrate:down
ALTER TABLE jobs RENAME COLUMN payload TO body;
