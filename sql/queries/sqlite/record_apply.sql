-- Record that :revision was applied under :token (re-applying rewrites its row).
INSERT INTO {schema}_applied_revision
       (version_table, revision, resource, applied_token, holder, method, script_sha256, source)
VALUES (:version_table, :revision, :resource, :token, :holder, 'upgrade', :script_sha256, :source)
ON CONFLICT (version_table, revision) DO UPDATE
   SET resource = excluded.resource, applied_token = excluded.applied_token,
       holder = excluded.holder, method = excluded.method,
       applied_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), script_sha256 = excluded.script_sha256,
       source = excluded.source
