CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    payload TEXT NOT NULL
);

DO $$
BEGIN
    EXECUTE format('ALTER TABLE %I DROP COLUMN %I', 'jobs', 'payload');
END
$$;
