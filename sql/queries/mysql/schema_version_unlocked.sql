-- The installed fence schema version, as this transaction's snapshot has it (no row lock): the
-- check before the install lock. Under the lock the runner reads it with schema_version.sql.
SELECT version FROM {schema}_schema_version WHERE one_row = 1
