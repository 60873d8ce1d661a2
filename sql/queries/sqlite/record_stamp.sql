-- Record that :revision was stamped under :token; a stamp never overwrites the record of a
-- revision that really ran.
INSERT INTO {schema}_applied_revision
       (version_table, revision, resource, applied_token, holder, method, script_sha256, source)
VALUES (:version_table, :revision, :resource, :token, :holder, 'stamp', :script_sha256, :source)
ON CONFLICT (version_table, revision) DO NOTHING
