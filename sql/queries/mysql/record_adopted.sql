-- Record :revision as adopted: the version table applied it before the database was fenced, so no
-- token applied it (applied_token 0, method 'adopt'); with its file's sha256 and text (compressed,
-- as record_apply.sql) when the file is there. The ADOPT event is logged once for all of them
-- (log_event.sql).
INSERT INTO {schema}_applied_revision
       (version_table, revision, resource, applied_token, holder, method, applied_at, script_sha256, source)
VALUES (:version_table, :revision, :resource, 0, :holder, 'adopt', UTC_TIMESTAMP(6), :script_sha256,
        COMPRESS(CONVERT(:source USING utf8mb4)))
