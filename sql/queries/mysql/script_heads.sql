-- A --sql script that takes its own lease reads the heads of its version table (:version_table,
-- quoted; :version_table_name in :version_schema, NULL for the current database) into
-- @fencemigrate_heads, sorted and comma-separated ('' when the table is empty or missing: no
-- trigger can read a table named at run time, so the script reads it itself, with a prepared
-- statement, before Alembic creates it from base).
SET @fencemigrate_heads = NULL;
SET @fencemigrate_read_heads = IF(
    EXISTS (SELECT 1 FROM information_schema.tables t
             WHERE t.table_schema = COALESCE(:version_schema, DATABASE()) AND t.table_name = :version_table_name),
    CONCAT('SELECT COALESCE(GROUP_CONCAT(version_num ORDER BY version_num SEPARATOR '',''), '''') ',
           'INTO @fencemigrate_heads FROM ', :version_table),
    'SET @fencemigrate_heads = ''''');
PREPARE fencemigrate_read_heads FROM @fencemigrate_read_heads;
EXECUTE fencemigrate_read_heads;
DEALLOCATE PREPARE fencemigrate_read_heads
