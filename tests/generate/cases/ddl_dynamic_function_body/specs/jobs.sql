CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    payload TEXT NOT NULL
);

CREATE FUNCTION drop_column(tbl TEXT, col TEXT) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('ALTER TABLE %I DROP COLUMN %I', tbl, col);
END
$$;

SELECT drop_column('jobs', 'payload');

CREATE OR REPLACE PROCEDURE trim_jobs()
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE 'ALTER TABLE jobs DROP COLUMN payload';
END
$$;
