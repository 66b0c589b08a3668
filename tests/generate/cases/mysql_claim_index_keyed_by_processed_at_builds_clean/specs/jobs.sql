-- MySQL has no partial index: processed_at right after the group makes `IS NULL` a lookup.
CREATE TABLE jobs (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    grp VARCHAR(64) NOT NULL,
    priority TINYINT UNSIGNED NOT NULL DEFAULT 100,
    processed_at DATETIME(6) NULL,
    payload JSON NOT NULL,
    KEY jobs_claim (grp, processed_at, priority, id)
) ENGINE=InnoDB;
