CREATE TABLE task_jobs (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    queue VARCHAR(100) NOT NULL,
    priority INTEGER NOT NULL,
    run_after DATETIME(6) NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 1,
    finished_at DATETIME(6) NULL,
    locked_until DATETIME NULL,
    last_error TEXT NULL,
    return_value JSON NULL,
    payload JSON NOT NULL,
    INDEX task_jobs_claim (queue, finished_at, priority, run_after, id)
);

CREATE TABLE task_jobs_dead (
    id BIGINT PRIMARY KEY,
    queue VARCHAR(100) NOT NULL,
    priority INTEGER NOT NULL,
    run_after DATETIME(6) NOT NULL,
    attempt INTEGER NOT NULL,
    finished_at DATETIME(6) NULL,
    locked_until DATETIME NULL,
    last_error TEXT NULL,
    return_value JSON NULL,
    payload JSON NOT NULL
);
