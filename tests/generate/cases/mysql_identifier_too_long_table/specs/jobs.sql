CREATE TABLE `outbound_transactional_email_deliveries_for_the_billing_service_q` (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    payload LONGBLOB NOT NULL
) ENGINE=InnoDB;
