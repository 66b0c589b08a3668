CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    payload TEXT NOT NULL
);

-- The string EXECUTE runs is code: this drops a column the module writes.
DO $$
BEGIN
    EXECUTE 'ALTER TABLE jobs DROP COLUMN payload';
END
$$;
