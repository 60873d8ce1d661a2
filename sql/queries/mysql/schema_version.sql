-- The installed fence schema version. A locking read: it sees the latest committed row, not the
-- transaction's snapshot, so a run that waited for another's install reads what that one wrote.
SELECT version FROM {schema}_schema_version WHERE one_row = 1 LOCK IN SHARE MODE
