-- MariaDB column compression.
ALTER TABLE jobs MODIFY COLUMN payload LONGBLOB NOT NULL COMPRESSED;
