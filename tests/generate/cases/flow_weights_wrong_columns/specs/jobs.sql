CREATE TABLE jobs (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    tenant_id BIGINT NOT NULL,
    locked_until DATETIME(6) NULL,
    payload JSON NOT NULL,
    KEY jobs_tenant (tenant_id, id)
);
CREATE TABLE tenant_weights (
    queue VARCHAR(64) NOT NULL,
    fair_key VARCHAR(64) NOT NULL,
    weight DOUBLE,
    PRIMARY KEY (queue, fair_key)
);
