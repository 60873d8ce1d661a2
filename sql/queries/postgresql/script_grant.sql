-- An offline script's own grant (script_grant_function.sql), when it runs: the token it was granted.
SELECT pg_temp.fencemigrate_script_grant(:resource, :holder, CAST(:ttl_ms AS bigint), CAST(:wait_ms AS bigint),
                                         :version_table, CAST(:heads AS text[]), :schema_version) AS granted_token
