CREATE TABLE lite_fair_jobs (
    id INTEGER PRIMARY KEY,
    user_id INTEGER NOT NULL,
    retry_after TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    locked_until TEXT,
    attempt INTEGER NOT NULL DEFAULT 0,
    payload TEXT NOT NULL
);
CREATE INDEX lite_fair_jobs_claim ON lite_fair_jobs (retry_after, id);
CREATE INDEX lite_fair_jobs_in_work ON lite_fair_jobs (locked_until);
CREATE INDEX lite_fair_jobs_user ON lite_fair_jobs (user_id, retry_after, id);
CREATE TABLE lite_weighted_jobs (
    id INTEGER PRIMARY KEY,
    user_id INTEGER NOT NULL,
    locked_until TEXT,
    attempt INTEGER NOT NULL DEFAULT 0,
    payload TEXT NOT NULL
);
CREATE INDEX lite_weighted_jobs_in_work ON lite_weighted_jobs (locked_until);
CREATE INDEX lite_weighted_jobs_user ON lite_weighted_jobs (user_id, id);
CREATE TABLE user_weights (
    queue TEXT NOT NULL,
    fair_key INTEGER NOT NULL,
    weight INTEGER NOT NULL,
    PRIMARY KEY (queue, fair_key)
);
