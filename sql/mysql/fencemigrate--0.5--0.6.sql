-- fencemigrate 0.5 -> 0.6 on MySQL and MariaDB: the ledger keeps the text of every revision file
-- it records.
--
-- The runner applies this file one statement at a time, under the install named lock, on a
-- database at 0.5 (a fresh install runs the current version's full script instead).

-- source: the text of the revision file, as the run that wrote the row read it (the same bytes its
-- script_sha256 was computed from, decoded as UTF-8), stored as COMPRESS(text): zlib, which MySQL
-- and MariaDB both build in, behind a 4-byte length (about a quarter of the size on source code).
-- The ledger statements compress it on the server (COMPRESS(CONVERT(:source USING utf8mb4)), so
-- the bytes are UTF-8 whatever the connection's character set) and read it back with
-- UNCOMPRESS(). InnoDB's own page compression would need a server setting and a whole-table
-- option; COMPRESS() needs neither. NULL for rows written before 0.6 ("source not recorded"), and
-- for a file that is not UTF-8 text.
ALTER TABLE @extschema@_applied_revision
    ADD COLUMN source LONGBLOB NULL;

UPDATE @extschema@_schema_version SET version = '0.6' WHERE one_row = 1;
