-- Attempts are counted elsewhere now.
ALTER TABLE jobs DROP COLUMN attempt;
