-- Pre-check mode, before :revision's DDL: its ledger row, marked 'applying' under :token, written
-- only while the fence still holds :token (0 rows: a newer token has written, FENCED). The
-- revision's first DDL statement commits it before it runs (MySQL commits the open transaction
-- first); settle_apply.sql settles it in the transaction that writes Alembic's version row.
-- A row still 'applying' afterwards is a dirty revision.
INSERT INTO {schema}_applied_revision
       (version_table, revision, resource, applied_token, holder, method, applied_at, script_sha256,
        source, state, state_token, state_holder, state_since)
SELECT :version_table, :revision, :resource, :token, :holder, 'upgrade', UTC_TIMESTAMP(6), :script_sha256,
       COMPRESS(CONVERT(:source USING utf8mb4)), 'applying', :token, :holder, UTC_TIMESTAMP(6)
  FROM {schema}_agent_fence f
 WHERE f.resource = :resource AND f.token = :token
ON DUPLICATE KEY UPDATE
       resource = VALUES(resource), applied_token = VALUES(applied_token), holder = VALUES(holder),
       method = VALUES(method), applied_at = VALUES(applied_at), script_sha256 = VALUES(script_sha256),
       source = VALUES(source),
       state = 'applying', state_token = VALUES(state_token), state_holder = VALUES(state_holder),
       state_since = VALUES(state_since)
