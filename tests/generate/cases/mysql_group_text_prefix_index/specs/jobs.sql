-- A TEXT column can only be indexed by a prefix: KEY (grp(191), id).
CREATE TABLE jobs (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    grp TEXT NOT NULL,
    payload LONGBLOB NOT NULL,
    KEY jobs_claim (grp(191), id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
