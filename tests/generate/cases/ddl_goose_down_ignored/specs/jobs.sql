-- +goose Up
CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    attempt INTEGER NOT NULL DEFAULT 0,
    payload JSONB NOT NULL
);

-- +goose Down
DROP TABLE jobs;
