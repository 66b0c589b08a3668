CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    order_id BIGINT NOT NULL,
    kind TEXT NOT NULL,
    payload JSONB NOT NULL
);
ALTER TABLE jobs ADD CONSTRAINT jobs_once UNIQUE (order_id, kind);
