CREATE TABLE my_after_jobs (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    grp VARCHAR(64) NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 1,
    processed_at DATETIME(6) NULL,
    parents INTEGER NOT NULL DEFAULT 0,
    payload JSON NOT NULL,
    KEY my_after_jobs_claim (grp, processed_at, id)
);
CREATE TABLE my_job_after (
    job_id BIGINT NOT NULL,
    after_id BIGINT NOT NULL,
    on_failure VARCHAR(16) NOT NULL,
    PRIMARY KEY (job_id, after_id)
);
