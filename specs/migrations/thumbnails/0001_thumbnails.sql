-- Thumbnails on SQLite, advisory form (an in-process lock registry); finished rows are kept.
CREATE TABLE thumbnail_jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    image_path TEXT NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 1,
    processed_at TEXT,
    payload TEXT NOT NULL
);
-- The claim order, over the rows still to do: claims never walk the finished ones.
CREATE INDEX thumbnail_jobs_claim ON thumbnail_jobs (id) WHERE processed_at IS NULL;
