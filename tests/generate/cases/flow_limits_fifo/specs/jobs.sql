CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    grp TEXT NOT NULL,
    locked_until TIMESTAMPTZ,
    payload JSONB NOT NULL
);
