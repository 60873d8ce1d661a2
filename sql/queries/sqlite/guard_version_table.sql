-- The guard triggers on Alembic's version table {version_table}: a write is refused unless a fenced
-- run marked it (mark_version_write.sql, in the same transaction). {insert_guard}, {update_guard}
-- and {delete_guard} are the triggers' names.
CREATE TRIGGER IF NOT EXISTS {insert_guard} BEFORE INSERT ON {version_table}
FOR EACH ROW WHEN NOT EXISTS (SELECT 1 FROM {schema}_version_write_claim)
BEGIN
    SELECT RAISE(ABORT, 'fencemigrate refused this write to the Alembic version table: it carries no fencing token (no fenced run made it), so it was not applied. Migrate this database with fencemigrate (upgrade, downgrade, stamp: with --token N, or let it take a lease), not with plain alembic; to allow tokenless writes on purpose, run `fencemigrate install --allow-tokenless-writes`.');
END;
CREATE TRIGGER IF NOT EXISTS {update_guard} BEFORE UPDATE ON {version_table}
FOR EACH ROW WHEN NOT EXISTS (SELECT 1 FROM {schema}_version_write_claim)
BEGIN
    SELECT RAISE(ABORT, 'fencemigrate refused this write to the Alembic version table: it carries no fencing token (no fenced run made it), so it was not applied. Migrate this database with fencemigrate (upgrade, downgrade, stamp: with --token N, or let it take a lease), not with plain alembic; to allow tokenless writes on purpose, run `fencemigrate install --allow-tokenless-writes`.');
END;
CREATE TRIGGER IF NOT EXISTS {delete_guard} BEFORE DELETE ON {version_table}
FOR EACH ROW WHEN NOT EXISTS (SELECT 1 FROM {schema}_version_write_claim)
BEGIN
    SELECT RAISE(ABORT, 'fencemigrate refused this write to the Alembic version table: it carries no fencing token (no fenced run made it), so it was not applied. Migrate this database with fencemigrate (upgrade, downgrade, stamp: with --token N, or let it take a lease), not with plain alembic; to allow tokenless writes on purpose, run `fencemigrate install --allow-tokenless-writes`.');
END;
