-- Pre-check mode, before :revision's downgrade DDL: its ledger row marked 'rolling_back' under
-- :token (created for a revision no fenced run recorded), only while the fence still holds
-- :token (0 rows: FENCED). Committed by the DDL's own implicit commit; settle_rollback.sql
-- deletes it in the transaction that writes Alembic's version row.
INSERT INTO {schema}_applied_revision
       (version_table, revision, resource, applied_token, holder, method, applied_at, script_sha256,
        state, state_token, state_holder, state_since)
SELECT :version_table, :revision, :resource, :token, :holder, 'upgrade', UTC_TIMESTAMP(6), NULL,
       'rolling_back', :token, :holder, UTC_TIMESTAMP(6)
  FROM {schema}_agent_fence f
 WHERE f.resource = :resource AND f.token = :token
ON DUPLICATE KEY UPDATE
       state = 'rolling_back', state_token = VALUES(state_token), state_holder = VALUES(state_holder),
       state_since = VALUES(state_since)
