-- Ledger postings on MariaDB / MySQL, applied one account at a time (advisory locks by account).
-- retry_after defaults to the server's clock: the worker's sessions run in UTC.
CREATE TABLE ledger_jobs (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    account_id BIGINT NOT NULL,
    retry_after DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    attempt INT NOT NULL DEFAULT 1,
    headers JSON NULL,
    payload JSON NOT NULL,
    KEY ledger_jobs_claim (retry_after, id)
) DEFAULT CHARSET=utf8mb4;

-- Spent jobs move here with their attempt count.
CREATE TABLE ledger_jobs_dead (
    id BIGINT NOT NULL PRIMARY KEY,
    account_id BIGINT NOT NULL,
    retry_after DATETIME(6) NOT NULL,
    attempt INT NOT NULL,
    headers JSON NULL,
    payload JSON NOT NULL
) DEFAULT CHARSET=utf8mb4;
