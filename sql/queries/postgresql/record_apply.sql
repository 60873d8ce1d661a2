-- Record that :revision was applied (or stamped) under :token, with its file's sha256 and text.
SELECT {schema}.record_apply(:version_table, :revision, :resource, :token, :holder, :method, :script_sha256, :source)
