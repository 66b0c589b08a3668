-- The mailer on MariaDB / MySQL: the same queue as specs/mailer.toml, row lock, one group.
CREATE TABLE email_jobs (
    job_id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    name VARCHAR(191) NOT NULL,
    attempt SMALLINT NOT NULL DEFAULT 1,
    payload LONGBLOB NOT NULL,
    PRIMARY KEY (job_id),
    KEY email_jobs_claim (name, job_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
