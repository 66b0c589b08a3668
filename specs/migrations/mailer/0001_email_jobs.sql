-- +goose Up
CREATE TABLE IF NOT EXISTS email_jobs (
    job_id  BIGSERIAL PRIMARY KEY,
    name    TEXT NOT NULL,
    attempt SMALLINT NOT NULL DEFAULT 1,
    payload BYTEA NOT NULL
);
-- The claim order: (group, id).
CREATE INDEX IF NOT EXISTS email_jobs_claim ON email_jobs (name, job_id);

-- +goose Down
DROP TABLE email_jobs;
