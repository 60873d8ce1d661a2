-- fencemigrate 0.2 -> 0.4 on SQLite: a hardened fence (issue 12). Version 0.3 (pre-check mode)
-- is not for SQLite, so this update goes straight to 0.4, the version the other databases have.
--
-- The runner applies this file, one statement at a time, inside a fenced run's own transaction:
-- after sql/sqlite/fencemigrate--0.2.sql on a fresh install, on its own on a database at 0.2.

UPDATE @extschema@_schema_version SET version = '0.4' WHERE one_row = 1;
