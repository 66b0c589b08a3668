CREATE TABLE jobs (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    account_id BIGINT NOT NULL,
    retry_after TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
    attempt INT NOT NULL DEFAULT 1,
    payload JSON NOT NULL,
    KEY jobs_claim (retry_after, id)
) ENGINE=InnoDB;
