CREATE TABLE jobs (
    id BIGINT NOT NULL,
    order_id BIGINT NOT NULL,
    payload BYTEA NOT NULL,
    CONSTRAINT jobs_pkey PRIMARY KEY (id),
    CONSTRAINT jobs_once UNIQUE (order_id)
);
