CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    locked_until TIMESTAMPTZ,
    payload JSONB NOT NULL
);

-- Looks helpful, but makes every lease renewal a non-HOT update.
CREATE INDEX jobs_lease ON jobs (locked_until, id);
