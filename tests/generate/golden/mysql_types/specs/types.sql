-- Every MySQL/MariaDB column type of the role table in docs/spec.md, bound to the roles that
-- take it and as data columns, with the other types a ClaimedRow attribute can have. UUID is
-- MariaDB's (10.7 and newer).
CREATE TABLE my_uuid_jobs (
    id UUID NOT NULL DEFAULT UUID() PRIMARY KEY,
    queue VARCHAR(100) NOT NULL,
    priority TINYINT NOT NULL DEFAULT 0,
    retry_after DATETIME(6) NOT NULL,
    attempt SMALLINT UNSIGNED NOT NULL DEFAULT 1,
    processed_at TIMESTAMP(6) NULL,
    locked_until DATETIME(6) NULL,
    headers JSON,
    payload JSON NOT NULL,
    c_tinyint TINYINT,
    c_smallint SMALLINT NOT NULL,
    c_mediumint MEDIUMINT,
    c_int INT NOT NULL,
    c_bigint BIGINT,
    c_int_unsigned INT UNSIGNED,
    c_bigint_unsigned BIGINT UNSIGNED NOT NULL,
    c_varchar VARCHAR(20) NOT NULL,
    c_char CHAR(3),
    c_tinytext TINYTEXT,
    c_text TEXT,
    c_mediumtext MEDIUMTEXT,
    c_longtext LONGTEXT NOT NULL,
    c_uuid UUID NOT NULL,
    c_uuid_null UUID,
    c_datetime DATETIME(6) NOT NULL,
    c_timestamp TIMESTAMP(6) NULL,
    c_json JSON,
    c_tinyblob TINYBLOB,
    c_blob BLOB,
    c_mediumblob MEDIUMBLOB,
    c_longblob LONGBLOB NOT NULL,
    c_binary BINARY(4),
    c_varbinary VARBINARY(16),
    c_boolean BOOLEAN NOT NULL,
    c_float FLOAT,
    c_double DOUBLE NOT NULL,
    c_decimal DECIMAL(10, 2) NOT NULL,
    c_date DATE,
    c_time TIME NOT NULL,
    KEY my_uuid_jobs_claim (queue, processed_at, priority, retry_after, id)
);

-- An id the caller gives (insert() returns the id given).
CREATE TABLE my_given_uuid_jobs (
    id UUID NOT NULL PRIMARY KEY,
    queue CHAR(10) NOT NULL,
    priority BIGINT UNSIGNED NOT NULL,
    retry_after TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    attempt INT NOT NULL DEFAULT 1,
    processed_at DATETIME(6) NULL,
    headers TEXT,
    payload LONGBLOB NOT NULL,
    KEY my_given_uuid_jobs_claim (queue, processed_at, priority, retry_after, id)
);

CREATE TABLE my_text_jobs (
    id CHAR(36) NOT NULL PRIMARY KEY,
    queue VARCHAR(50) NOT NULL,
    attempt MEDIUMINT NOT NULL DEFAULT 1,
    retry_after DATETIME NOT NULL,
    headers LONGTEXT,
    payload TEXT NOT NULL,
    KEY my_text_jobs_claim (queue, retry_after, id)
);

CREATE TABLE my_int_jobs (
    id INT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
    queue TINYTEXT NOT NULL,
    locked_until DATETIME NULL,
    payload VARBINARY(255) NOT NULL,
    KEY my_int_jobs_claim (queue(100), id)
);

CREATE TABLE my_binary_jobs (
    id BIGINT NOT NULL PRIMARY KEY,
    queue MEDIUMTEXT NOT NULL,
    locked_until TIMESTAMP NULL,
    payload BINARY(16) NOT NULL,
    KEY my_binary_jobs_claim (queue(100), id)
);

CREATE TABLE my_blob_jobs (
    id SMALLINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    locked_until DATETIME(6) NULL,
    payload MEDIUMBLOB NOT NULL,
    headers JSON
);

-- The advisory form on an integer id: its candidates start after the last row read.
CREATE TABLE my_advisory_jobs (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    account VARCHAR(64) NOT NULL,
    attempt INT NOT NULL DEFAULT 1,
    payload JSON NOT NULL,
    KEY my_advisory_jobs_claim (id)
);
