CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    queue TEXT NOT NULL,
    priority SMALLINT NOT NULL DEFAULT 0,
    payload JSONB NOT NULL
);
CREATE INDEX jobs_queue ON jobs (queue);
