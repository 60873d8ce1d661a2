-- Remove the guard triggers of Alembic's version table (guard_version_table.sql names them).
DROP TRIGGER IF EXISTS {insert_guard};
DROP TRIGGER IF EXISTS {update_guard};
DROP TRIGGER IF EXISTS {delete_guard};
