CREATE TABLE jobs (
    id INTEGER PRIMARY KEY AUTO_INCREMENT,
    locked_until DATETIME NULL,
    errors JSON NULL,
    payload JSON NOT NULL
);
