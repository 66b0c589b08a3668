CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    payload TEXT NOT NULL
);

-- Backfill written as a DO block: it only updates rows, which a reviewer confirmed.
DO $$
BEGIN
    UPDATE jobs SET payload = upper(payload);
END
$$;
