CREATE TABLE jobs (
    id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
    attempt SMALLINT NOT NULL DEFAULT 1,
    payload LONGBLOB NOT NULL
) ENGINE=InnoDB;

-- Spent jobs, with the same columns (and AUTO_INCREMENT) as the queue.
CREATE TABLE jobs_dead LIKE jobs;
