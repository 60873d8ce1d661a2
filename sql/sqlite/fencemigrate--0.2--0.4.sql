-- fencemigrate 0.2 -> 0.4 on SQLite: a hardened fence (issue 12). Version 0.3 (pre-check mode)
-- is not for SQLite, so this update goes straight to 0.4, the version the other databases have.
--
-- The runner applies this file, one statement at a time, inside a fenced run's own transaction:
-- after sql/sqlite/fencemigrate--0.2.sql on a fresh install, on its own on a database at 0.2.

-- == Writes without a token (issue 12, defect 5) ==
-- Once a database is fenced, Alembic's version table refuses writes that no fenced run made
-- (triggers created per version table from sql/queries/sqlite/guard_version_table.sql). SQLite has
-- one writer at a time and a persistent trigger cannot read TEMP tables: a fenced run writes the
-- row of version_write_claim just before Alembic writes its version row and deletes it right
-- after, in the same transaction, so no other connection ever sees it committed.
CREATE TABLE IF NOT EXISTS @extschema@_version_write_claim (
    one_row INTEGER NOT NULL PRIMARY KEY CHECK (one_row = 1)
);

-- Version tables whose guard was removed on purpose (fencemigrate install --allow-tokenless-writes).
CREATE TABLE IF NOT EXISTS @extschema@_tokenless_writes_allowed (
    version_table TEXT NOT NULL PRIMARY KEY,
    allowed_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

UPDATE @extschema@_schema_version SET version = '0.4' WHERE one_row = 1;
