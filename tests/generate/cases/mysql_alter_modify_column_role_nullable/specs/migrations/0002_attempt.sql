-- MODIFY COLUMN replaces the whole definition: NOT NULL is lost when it is not repeated.
ALTER TABLE jobs MODIFY COLUMN attempt INT DEFAULT 1;
