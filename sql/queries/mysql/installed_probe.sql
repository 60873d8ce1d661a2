-- Whether the fence schema is installed in the current database: the name of its version table, or no row.
SELECT table_name FROM information_schema.tables
 WHERE table_schema = DATABASE() AND table_name = :table_name
