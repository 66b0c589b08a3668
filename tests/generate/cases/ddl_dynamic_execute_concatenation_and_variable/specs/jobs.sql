CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    payload TEXT NOT NULL
);

DO $$
BEGIN
    EXECUTE 'ALTER TABLE ' || 'jobs' || ' DROP COLUMN payload';
END
$$;

-- The text reaches EXECUTE through a variable.
DO $$
DECLARE
    stmt TEXT := 'ALTER TABLE jobs RENAME COLUMN payload TO body';
BEGIN
    EXECUTE stmt;
END
$$;
