-- Record that :revision was stamped under :token; a stamp never overwrites the record of a
-- revision that really ran.
INSERT INTO {schema}_applied_revision
       (version_table, revision, resource, applied_token, holder, method, applied_at, script_sha256, source)
SELECT :version_table, :revision, :resource, :token, :holder, 'stamp', UTC_TIMESTAMP(6), :script_sha256,
       COMPRESS(CONVERT(:source USING utf8mb4))
  FROM DUAL
 WHERE NOT EXISTS (SELECT 1 FROM {schema}_applied_revision
                    WHERE version_table = :version_table AND revision = :revision)
