CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    payload TEXT NOT NULL
);

-- A DO body may be an ordinary string: it is code all the same.
DO 'BEGIN ALTER TABLE jobs DROP COLUMN payload; END';
