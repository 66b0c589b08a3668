CREATE TABLE my_replace_jobs (
    id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
    order_id BIGINT NOT NULL,
    kind VARCHAR(40) NOT NULL,
    retry_after DATETIME(6) NOT NULL,
    enqueued_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    attempt INT NOT NULL DEFAULT 0,
    payload JSON NOT NULL,
    UNIQUE KEY my_replace_jobs_once (order_id, kind),
    KEY my_replace_jobs_claim (retry_after, id)
) DEFAULT CHARSET=utf8mb4;

CREATE TABLE my_replace_leases (
    id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
    doc_id VARCHAR(100) NOT NULL,
    priority INT NOT NULL DEFAULT 0,
    retry_after DATETIME(6) NOT NULL,
    locked_until DATETIME,
    attempt INT NOT NULL DEFAULT 0,
    payload JSON NOT NULL,
    UNIQUE KEY my_replace_leases_doc (doc_id),
    KEY my_replace_leases_claim (priority, retry_after, id)
) DEFAULT CHARSET=utf8mb4;
