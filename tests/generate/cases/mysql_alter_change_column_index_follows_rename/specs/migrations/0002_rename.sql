-- The server renames the column inside jobs_claim too: the index still serves the claim order.
ALTER TABLE jobs CHANGE COLUMN grp queue_name VARCHAR(64) NOT NULL;
