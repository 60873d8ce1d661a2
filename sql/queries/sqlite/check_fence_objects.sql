-- The fence tables and triggers as sqlite_master has them, for `fencemigrate check --db`, which
-- compares them with the install script (SQLite keeps each one's CREATE statement as written,
-- without IF NOT EXISTS). :prefix is the fence schema's name and an underscore.
SELECT type AS kind, name, sql AS definition, 1 AS enabled
  FROM sqlite_master
 WHERE type IN ('table', 'trigger')
   AND substr(name, 1, length(:prefix)) = :prefix
 ORDER BY type, name
