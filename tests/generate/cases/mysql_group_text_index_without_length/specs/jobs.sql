-- MySQL and MariaDB refuse this index (a TEXT column needs a prefix length); inboxgen does not
-- validate the DDL against the server, only reads it.
CREATE TABLE jobs (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    grp TEXT NOT NULL,
    payload LONGBLOB NOT NULL,
    KEY jobs_claim (grp, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
