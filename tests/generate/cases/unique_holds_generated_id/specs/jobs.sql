-- A partitioned table's unique index must hold its partition key, here the id: a unique
-- key with the generated id never conflicts, so nothing would ever be replaced.
CREATE TABLE jobs (
    id BIGSERIAL,
    job_key TEXT NOT NULL,
    payload JSONB NOT NULL,
    PRIMARY KEY (id)
) PARTITION BY HASH (id);
CREATE TABLE jobs_p0 PARTITION OF jobs FOR VALUES WITH (MODULUS 2, REMAINDER 0);
CREATE TABLE jobs_p1 PARTITION OF jobs FOR VALUES WITH (MODULUS 2, REMAINDER 1);
CREATE UNIQUE INDEX jobs_key ON jobs (job_key, id);
