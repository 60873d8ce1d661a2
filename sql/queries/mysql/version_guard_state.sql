-- How writes without a token are treated on the version table :table_name (ledger name
-- :version_table): allowed (opted out, since when), guarded (its insert trigger :trigger_name is
-- there), and whether the version table exists, in the current database.
SELECT (SELECT a.allowed_at FROM {schema}_tokenless_writes_allowed a
         WHERE a.version_table = :version_table) AS allowed_at,
       EXISTS (SELECT 1 FROM information_schema.triggers t
                WHERE t.trigger_schema = DATABASE() AND t.trigger_name = :trigger_name) AS guarded,
       EXISTS (SELECT 1 FROM information_schema.tables t
                WHERE t.table_schema = DATABASE() AND t.table_name = :table_name) AS table_exists
