CREATE TABLE jobs (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    order_id BIGINT NOT NULL,
    kind VARCHAR(32) NOT NULL,
    payload JSON NOT NULL,
    UNIQUE KEY jobs_once (order_id, kind)
) ENGINE=InnoDB;
