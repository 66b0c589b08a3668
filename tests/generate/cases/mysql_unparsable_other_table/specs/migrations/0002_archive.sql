-- MariaDB column compression, on a table the queue does not use.
CREATE TABLE jobs_archive (
    id BIGINT NOT NULL PRIMARY KEY,
    payload LONGBLOB COMPRESSED NOT NULL
) ENGINE=InnoDB;
