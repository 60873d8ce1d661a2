-- fencemigrate 0.5 -> 0.6 on SQLite: the ledger keeps the text of every revision file it records.
--
-- The runner applies this file, one statement at a time, inside a fenced run's own transaction:
-- on a database at 0.5 (a fresh install runs the current version's full script instead).

-- source: the text of the revision file, as the run that wrote the row read it (the same bytes
-- its script_sha256 was computed from, decoded as UTF-8). NULL for rows written before 0.6
-- ("source not recorded"), and for a file that is not UTF-8 text. Stored as it is: SQLite has no
-- compression of its own (a revision file is a few kB; the PostgreSQL and MySQL schemas compress).
ALTER TABLE @extschema@_applied_revision ADD COLUMN source TEXT;

UPDATE @extschema@_schema_version SET version = '0.6' WHERE one_row = 1;
