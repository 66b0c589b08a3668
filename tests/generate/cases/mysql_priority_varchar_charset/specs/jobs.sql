CREATE TABLE jobs (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    priority VARCHAR(16) CHARACTER SET ascii NOT NULL DEFAULT 'normal',
    payload JSON NOT NULL,
    KEY jobs_claim (priority, id)
) ENGINE=InnoDB;
