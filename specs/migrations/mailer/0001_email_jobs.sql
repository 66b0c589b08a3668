-- +goose Up
CREATE TABLE IF NOT EXISTS email_jobs (
    job_id  BIGSERIAL PRIMARY KEY,
    name    TEXT NOT NULL,
    attempt SMALLINT NOT NULL DEFAULT 1,
    payload BYTEA NOT NULL
);
-- The claim order: (group, id).
CREATE INDEX IF NOT EXISTS email_jobs_claim ON email_jobs (name, job_id);
-- Queue churn: room on each page for updated rows, vacuum after a fixed count of dead rows.
ALTER TABLE email_jobs SET (fillfactor = 50, autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 5000, autovacuum_vacuum_insert_scale_factor = 0);

-- +goose Down
DROP TABLE email_jobs;
