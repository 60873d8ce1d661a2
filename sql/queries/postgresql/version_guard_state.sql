-- How writes without a token are treated on the version table :relation (ledger name
-- :version_table): allowed (opted out, since when), guarded (the trigger is on it).
SELECT (SELECT a.allowed_at FROM {schema}.tokenless_writes_allowed a
         WHERE a.version_table = :version_table) AS allowed_at,
       EXISTS (SELECT 1 FROM pg_trigger t
                WHERE t.tgrelid = to_regclass(:relation) AND t.tgname = 'fencemigrate_no_tokenless_write'
                  AND t.tgenabled <> 'D') AS guarded
