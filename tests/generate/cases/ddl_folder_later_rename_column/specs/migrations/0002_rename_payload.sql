ALTER TABLE jobs RENAME COLUMN payload TO body;
