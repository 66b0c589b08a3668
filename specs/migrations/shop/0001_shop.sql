CREATE TABLE IF NOT EXISTS orders (
    id INTEGER PRIMARY KEY,
    email TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS checkout_jobs (
    id INTEGER PRIMARY KEY,
    locked_until TEXT,
    payload BLOB NOT NULL
);

CREATE TABLE IF NOT EXISTS email_jobs (
    id INTEGER PRIMARY KEY,
    priority INTEGER NOT NULL,
    retry_after TEXT NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 1,
    processed_at TEXT,
    locked_until TEXT,
    order_id INTEGER NOT NULL REFERENCES orders (id),
    kind TEXT NOT NULL,
    payload BLOB NOT NULL
);

-- One email of each kind per order: placing an order twice sends the first order's emails only.
CREATE UNIQUE INDEX IF NOT EXISTS email_jobs_once ON email_jobs (order_id, kind);
-- The claim order, over the rows still to send.
CREATE INDEX IF NOT EXISTS email_jobs_claim ON email_jobs (priority, retry_after, id)
    WHERE processed_at IS NULL;

-- Emails that failed five times, kept for a person to look at.
CREATE TABLE IF NOT EXISTS email_jobs_dead (
    id INTEGER PRIMARY KEY,
    priority INTEGER NOT NULL,
    retry_after TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    processed_at TEXT,
    locked_until TEXT,
    order_id INTEGER NOT NULL,
    kind TEXT NOT NULL,
    payload BLOB NOT NULL
);
