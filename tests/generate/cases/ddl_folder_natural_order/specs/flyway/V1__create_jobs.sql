CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    attempt INT
);
