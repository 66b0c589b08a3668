-- Let the database number the jobs from now on.

ALTER TABLE jobs
    ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY;
