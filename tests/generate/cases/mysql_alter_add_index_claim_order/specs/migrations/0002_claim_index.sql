ALTER TABLE jobs ADD INDEX jobs_claim (grp, priority, id);
