CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    lease_expires TIMESTAMPTZ,
    payload JSONB NOT NULL
);
