-- Record that :revision was applied (or stamped) under :token.
SELECT {schema}.record_apply(:version_table, :revision, :resource, :token, :holder, :method, :script_sha256)
