-- Outgoing chat messages: each conversation's messages leave in order (FIFO groups).
CREATE TABLE "Chat"."OutgoingMessages" (
    "MessageId" BIGSERIAL PRIMARY KEY,
    conversation TEXT NOT NULL,
    retry_after TIMESTAMPTZ NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 1,
    locked_until TIMESTAMPTZ,
    body TEXT NOT NULL
);
CREATE INDEX outgoing_claim ON "Chat"."OutgoingMessages" (conversation, retry_after, "MessageId");
-- Queue churn: room on each page for updated rows, vacuum after a fixed count of dead rows.
ALTER TABLE "Chat"."OutgoingMessages" SET (fillfactor = 50, autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 5000, autovacuum_vacuum_insert_scale_factor = 0);
