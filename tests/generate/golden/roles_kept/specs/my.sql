CREATE TABLE my_error_jobs (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    retry_after DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    locked_until DATETIME(6) NULL,
    attempt INTEGER NOT NULL DEFAULT 0,
    error TEXT NULL,
    progress JSON NULL,
    payload JSON NOT NULL,
    KEY my_error_jobs_claim (retry_after, id)
);
CREATE TABLE my_error_jobs_dead LIKE my_error_jobs;

CREATE TABLE my_result_jobs (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    grp VARCHAR(64) NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 0,
    processed_at DATETIME(6) NULL,
    error VARCHAR(300) NULL,
    result JSON NULL,
    payload BLOB NOT NULL,
    KEY my_result_jobs_claim (grp, processed_at, id)
);
