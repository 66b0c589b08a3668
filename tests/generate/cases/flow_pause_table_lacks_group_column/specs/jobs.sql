CREATE TABLE jobs (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    grp VARCHAR(64) NOT NULL,
    payload JSON NOT NULL,
    KEY jobs_claim (grp, id)
);

CREATE TABLE job_pauses (
    queue VARCHAR(64) NOT NULL
);
