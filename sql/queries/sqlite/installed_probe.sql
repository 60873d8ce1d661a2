-- Whether the fence schema is installed: the name of its version table, or no row.
SELECT name FROM sqlite_master WHERE type = 'table' AND name = :table_name
