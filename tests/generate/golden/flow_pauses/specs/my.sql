CREATE TABLE my_paused_jobs (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    grp VARCHAR(64) NOT NULL,
    locked_until DATETIME NULL,
    attempt INTEGER NOT NULL DEFAULT 0,
    payload JSON NOT NULL,
    KEY my_paused_jobs_claim (grp, id)
);
CREATE TABLE queue_pauses (
    queue VARCHAR(128) NOT NULL,
    paused_group VARCHAR(64) NULL
);
