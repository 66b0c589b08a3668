CREATE TABLE jobs (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    payload LONGBLOB NOT NULL,
    note TEXT
);

PREPARE drop_note FROM 'ALTER TABLE jobs DROP COLUMN payload';
EXECUTE drop_note;
DEALLOCATE PREPARE drop_note;

-- The statement text built in a variable, then prepared from it.
SET @stmt = CONCAT('ALTER TABLE ', 'jobs', ' DROP COLUMN note');
PREPARE drop_more FROM @stmt;
EXECUTE drop_more;
