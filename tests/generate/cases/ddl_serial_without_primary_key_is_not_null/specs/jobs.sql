CREATE TABLE jobs (
    id BIGSERIAL,
    payload TEXT NOT NULL
);
CREATE UNIQUE INDEX jobs_id ON jobs (id);
