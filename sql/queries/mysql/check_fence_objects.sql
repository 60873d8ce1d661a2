-- The fence tables and guard triggers in the current database as information_schema has them,
-- for `fencemigrate check --db`, which compares them with the install script. A trigger's
-- definition is put together from its timing, event, table and body (ACTION_STATEMENT keeps the
-- body as it was written); MySQL has no disabled triggers. :prefix is the fence schema's name
-- and an underscore. One row per object.
SELECT 'table' AS kind, table_name AS name, NULL AS definition, 1 AS enabled
  FROM information_schema.tables
 WHERE table_schema = DATABASE()
   AND table_type = 'BASE TABLE'
   AND LEFT(table_name, CHAR_LENGTH(:prefix)) = :prefix
UNION ALL
SELECT 'trigger', trigger_name,
       CONCAT('CREATE TRIGGER ', trigger_name, ' ', action_timing, ' ', event_manipulation,
              ' ON ', event_object_table, ' FOR EACH ', action_orientation, ' ', action_statement),
       1
  FROM information_schema.triggers
 WHERE trigger_schema = DATABASE()
   AND LEFT(trigger_name, CHAR_LENGTH(:prefix)) = :prefix
 ORDER BY 1, 2
