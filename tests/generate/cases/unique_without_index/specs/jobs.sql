CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    order_id BIGINT NOT NULL,
    kind TEXT NOT NULL,
    payload JSONB NOT NULL
);
CREATE INDEX jobs_order ON jobs (order_id, kind);
