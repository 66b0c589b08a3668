CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    "progress%" INTEGER NOT NULL DEFAULT 0,
    "load%pct" TEXT NOT NULL,
    payload TEXT NOT NULL
);
