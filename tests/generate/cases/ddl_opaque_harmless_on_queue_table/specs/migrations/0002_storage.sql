-- Large payloads live out of line.

ALTER TABLE jobs
    ALTER COLUMN payload SET STORAGE EXTERNAL;
