CREATE TABLE jobs (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    urgency VARCHAR(10) NOT NULL,
    payload JSON NOT NULL,
    KEY jobs_claim (urgency, id)
);
