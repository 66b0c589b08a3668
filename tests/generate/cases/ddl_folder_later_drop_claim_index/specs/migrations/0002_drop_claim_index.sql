DROP INDEX jobs_claim;
