-- Record that :revision was applied under :token, with its file's sha256 and text (compressed: see
-- sql/mysql/fencemigrate--1.0.sql), settling a row written as 'applying' before
-- its DDL (re-applying rewrites the row). Runs in the transaction that writes Alembic's version row.
INSERT INTO {schema}_applied_revision
       (version_table, revision, resource, applied_token, holder, method, applied_at, script_sha256,
        source, state, state_token, state_holder, state_since)
VALUES (:version_table, :revision, :resource, :token, :holder, 'upgrade', UTC_TIMESTAMP(6), :script_sha256,
        COMPRESS(CONVERT(:source USING utf8mb4)), 'applied', NULL, NULL, NULL)
ON DUPLICATE KEY UPDATE
       resource = VALUES(resource), applied_token = VALUES(applied_token), holder = VALUES(holder),
       method = VALUES(method), applied_at = VALUES(applied_at), script_sha256 = VALUES(script_sha256),
       source = VALUES(source),
       state = 'applied', state_token = NULL, state_holder = NULL, state_since = NULL
