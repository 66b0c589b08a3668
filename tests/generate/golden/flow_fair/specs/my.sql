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
CREATE TABLE my_weighted_jobs (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    account_id VARCHAR(64) NOT NULL,
    priority INTEGER NOT NULL DEFAULT 0,
    locked_until DATETIME(6) NULL,
    attempt INTEGER NOT NULL DEFAULT 0,
    payload JSON NOT NULL,
    KEY my_weighted_jobs_claim (priority, id),
    KEY my_weighted_jobs_account (account_id, priority, id),
    KEY my_weighted_jobs_in_work (locked_until),
    KEY my_weighted_jobs_account_in_work (account_id, locked_until)
);
CREATE TABLE account_weights (
    queue VARCHAR(64) NOT NULL,
    fair_key VARCHAR(64) NOT NULL,
    weight SMALLINT NOT NULL,
    PRIMARY KEY (queue, fair_key)
);
