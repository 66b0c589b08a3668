-- The queue moved to another service.
DROP TABLE jobs;
