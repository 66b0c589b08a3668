CREATE TABLE lite_paused_jobs (
    id INTEGER PRIMARY KEY,
    key TEXT NOT NULL,
    payload TEXT NOT NULL
);
CREATE TABLE queue_pauses (
    queue TEXT NOT NULL
);
