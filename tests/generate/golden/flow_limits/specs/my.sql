CREATE TABLE my_limited_jobs (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    grp VARCHAR(64) NOT NULL,
    account_id BIGINT NOT NULL,
    locked_until DATETIME(6) NULL,
    processed_at DATETIME(6) NULL,
    attempt INTEGER NOT NULL DEFAULT 0,
    payload JSON NOT NULL,
    KEY my_limited_jobs_claim (grp, processed_at, id),
    KEY my_limited_jobs_in_work (locked_until),
    KEY my_limited_jobs_account (account_id, locked_until),
    KEY my_limited_jobs_walk (grp, account_id, id)
);
CREATE TABLE queue_claims (
    queue VARCHAR(128) NOT NULL,
    claimed_at DATETIME(6) NOT NULL,
    claim_key BIGINT NOT NULL,
    KEY queue_claims_window (queue, claim_key, claimed_at)
);
CREATE TABLE my_seated_jobs (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    account_id BIGINT NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 0,
    payload JSON NOT NULL
);
CREATE TABLE my_prioritized_limited_jobs (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    account_id BIGINT NOT NULL,
    priority INTEGER NOT NULL DEFAULT 0,
    retry_after DATETIME(6) NOT NULL,
    locked_until DATETIME(6) NULL,
    attempt INTEGER NOT NULL DEFAULT 0,
    payload JSON NOT NULL,
    KEY my_prioritized_limited_jobs_claim (priority, retry_after, id),
    KEY my_prioritized_limited_jobs_in_work (locked_until),
    KEY my_prioritized_limited_jobs_account (account_id, locked_until),
    KEY my_prioritized_limited_jobs_walk (account_id, priority, retry_after, id)
);
