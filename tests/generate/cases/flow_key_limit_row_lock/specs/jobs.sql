CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    tenant TEXT NOT NULL,
    payload JSONB NOT NULL
);
