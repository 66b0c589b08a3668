CREATE TABLE jobs (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    conversation VARCHAR(64) NOT NULL,
    retry_after DATETIME NOT NULL,
    attempt INT NOT NULL DEFAULT 1,
    locked_until DATETIME NULL,
    body TEXT NOT NULL,
    KEY jobs_claim (conversation, retry_after, id)
) ENGINE=InnoDB;
