-- Every PostgreSQL column type of the role table in docs/spec.md, bound to the roles that take
-- it and as data columns, with the other types a ClaimedRow attribute can have.
CREATE TABLE pg_uuid_jobs (
    id UUID PRIMARY KEY DEFAULT gen_random_uuid(),
    queue VARCHAR(100) NOT NULL,
    priority SMALLINT NOT NULL DEFAULT 0,
    retry_after TIMESTAMP NOT NULL DEFAULT (now() AT TIME ZONE 'utc'),
    attempt INTEGER NOT NULL DEFAULT 1,
    processed_at TIMESTAMP,
    locked_until TIMESTAMP,
    headers JSONB,
    payload JSONB NOT NULL,
    c_smallint SMALLINT NOT NULL,
    c_integer INTEGER,
    c_bigint BIGINT NOT NULL,
    c_serial SERIAL,
    c_text TEXT NOT NULL,
    c_varchar VARCHAR(20),
    c_char CHAR(3) NOT NULL,
    c_uuid UUID NOT NULL,
    c_uuid_null UUID,
    c_timestamp TIMESTAMP NOT NULL,
    c_timestamptz TIMESTAMPTZ,
    c_json JSON,
    c_jsonb JSONB NOT NULL,
    c_bytea BYTEA,
    c_boolean BOOLEAN NOT NULL,
    c_real REAL,
    c_double DOUBLE PRECISION NOT NULL,
    c_numeric NUMERIC(10, 2) NOT NULL,
    c_date DATE,
    c_time TIME NOT NULL
);
CREATE INDEX pg_uuid_jobs_claim ON pg_uuid_jobs (queue, priority, retry_after, id)
    WHERE processed_at IS NULL;

-- An id the caller gives (insert() returns it as the database hands it back).
CREATE TABLE pg_given_uuid_jobs (
    id UUID PRIMARY KEY,
    queue CHAR(10) NOT NULL,
    priority BIGINT NOT NULL,
    retry_after TIMESTAMPTZ NOT NULL,
    attempt SMALLINT NOT NULL DEFAULT 1,
    processed_at TIMESTAMPTZ,
    headers JSON,
    payload BYTEA NOT NULL,
    c_smallserial SMALLSERIAL,
    c_bigserial BIGSERIAL
);
CREATE INDEX pg_given_uuid_jobs_claim ON pg_given_uuid_jobs (queue, priority, retry_after, id)
    WHERE processed_at IS NULL;

CREATE TABLE pg_text_jobs (
    id TEXT PRIMARY KEY,
    queue TEXT NOT NULL,
    attempt BIGINT NOT NULL DEFAULT 1,
    retry_after TIMESTAMPTZ NOT NULL DEFAULT now(),
    headers TEXT,
    payload TEXT NOT NULL
);
CREATE INDEX pg_text_jobs_claim ON pg_text_jobs (queue, retry_after, id);

CREATE TABLE pg_smallint_jobs (
    id SMALLINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    locked_until TIMESTAMP,
    payload VARCHAR(200) NOT NULL
);

CREATE TABLE pg_serial_jobs (
    id SERIAL PRIMARY KEY,
    locked_until TIMESTAMPTZ,
    payload JSON NOT NULL
);

CREATE TABLE pg_integer_jobs (
    id INTEGER PRIMARY KEY,
    queue VARCHAR(20) NOT NULL,
    payload BYTEA NOT NULL
);
CREATE INDEX pg_integer_jobs_claim ON pg_integer_jobs (queue, id);

-- Room on each page for updated rows, and vacuum after a fixed number of dead rows.
ALTER TABLE pg_uuid_jobs SET (fillfactor = 70, autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 5000, autovacuum_vacuum_insert_scale_factor = 0);
ALTER TABLE pg_given_uuid_jobs SET (fillfactor = 70, autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 5000, autovacuum_vacuum_insert_scale_factor = 0);
ALTER TABLE pg_text_jobs SET (fillfactor = 70, autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 5000, autovacuum_vacuum_insert_scale_factor = 0);
ALTER TABLE pg_smallint_jobs SET (fillfactor = 70, autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 5000, autovacuum_vacuum_insert_scale_factor = 0);
ALTER TABLE pg_serial_jobs SET (fillfactor = 70, autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 5000, autovacuum_vacuum_insert_scale_factor = 0);
ALTER TABLE pg_integer_jobs SET (fillfactor = 70, autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 5000, autovacuum_vacuum_insert_scale_factor = 0);

-- The advisory form on an integer id: its candidates start after the last row read.
CREATE TABLE pg_advisory_jobs (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    account TEXT NOT NULL,
    priority INTEGER NOT NULL DEFAULT 0,
    retry_after TIMESTAMPTZ NOT NULL DEFAULT now(),
    attempt INTEGER NOT NULL DEFAULT 1,
    payload JSONB NOT NULL
) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
        autovacuum_vacuum_insert_scale_factor = 0);
CREATE INDEX pg_advisory_jobs_claim ON pg_advisory_jobs (priority, retry_after, id);
