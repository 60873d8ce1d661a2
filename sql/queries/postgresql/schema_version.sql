-- The installed fence schema version.
SELECT {schema}.schema_version()
