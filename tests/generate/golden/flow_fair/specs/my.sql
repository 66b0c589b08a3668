CREATE TABLE my_fair_jobs (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    grp VARCHAR(64) NOT NULL,
    account_id BIGINT NOT NULL,
    locked_until DATETIME(6) NULL,
    processed_at DATETIME(6) NULL,
    attempt INTEGER NOT NULL DEFAULT 0,
    payload JSON NOT NULL,
    KEY my_fair_jobs_claim (grp, processed_at, id),
    KEY my_fair_jobs_account (grp, account_id, id)
);
