-- How writes without a token are treated on the version table :table_name (ledger name
-- :version_table): allowed (opted out, since when), guarded (its insert trigger :trigger_name is
-- there), and whether the version table exists.
SELECT (SELECT a.allowed_at FROM {schema}_tokenless_writes_allowed a
         WHERE a.version_table = :version_table) AS allowed_at,
       EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'trigger' AND name = :trigger_name) AS guarded,
       EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = :table_name) AS table_exists
