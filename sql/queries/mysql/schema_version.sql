-- The installed fence schema version.
SELECT version FROM {schema}_schema_version WHERE one_row = 1
