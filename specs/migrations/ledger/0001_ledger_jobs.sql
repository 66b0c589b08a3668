-- Ledger postings, applied one account at a time: jobs of one account share an advisory lock.
CREATE TABLE ledger_jobs (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    account_id BIGINT NOT NULL,
    retry_after TIMESTAMPTZ NOT NULL DEFAULT now(),
    attempt INTEGER NOT NULL DEFAULT 1,
    headers JSONB,
    payload JSONB NOT NULL
);
CREATE INDEX ledger_jobs_claim ON ledger_jobs (retry_after, id);
-- Queue churn: room on each page for updated rows, vacuum after a fixed count of dead rows.
ALTER TABLE ledger_jobs SET (fillfactor = 50, autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 5000, autovacuum_vacuum_insert_scale_factor = 0);

-- Spent jobs move here with their attempt count.
CREATE TABLE ledger_jobs_dead (
    id BIGINT PRIMARY KEY,
    account_id BIGINT NOT NULL,
    retry_after TIMESTAMPTZ NOT NULL,
    attempt INTEGER NOT NULL,
    headers JSONB,
    payload JSONB NOT NULL
);
