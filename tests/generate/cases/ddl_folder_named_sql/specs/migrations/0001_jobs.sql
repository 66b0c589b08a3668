CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    attempt INT DEFAULT 0,
    payload BYTEA NOT NULL
);
