CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    leased_until TIMESTAMPTZ,
    attempt INTEGER NOT NULL DEFAULT 0,
    payload TEXT NOT NULL
);
