-- Thumbnails on SQLite, advisory form (an in-process lock registry); finished rows are kept.
CREATE TABLE thumbnail_jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    image_path TEXT NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 1,
    processed_at TEXT,
    payload TEXT NOT NULL
);
