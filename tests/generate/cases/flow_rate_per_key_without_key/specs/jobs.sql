CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    locked_until TIMESTAMPTZ,
    payload JSONB NOT NULL
);
