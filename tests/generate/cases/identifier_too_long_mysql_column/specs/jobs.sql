CREATE TABLE jobs (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    `delivery_attempts_counted_by_the_outbound_mail_relay_service_abcc` INT NOT NULL DEFAULT 0,
    payload JSON NOT NULL
);
