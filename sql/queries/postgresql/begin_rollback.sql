-- Pre-check mode, before :revision's downgrade DDL: its ledger row marked 'rolling_back' under
-- :token (created for a revision no fenced run recorded), only while the fence still holds
-- :token (0 rows: FENCED), and committed before the DDL runs; the ledger row goes with Alembic's
-- version row afterwards.
INSERT INTO {schema}.applied_revision
       (version_table, revision, resource, applied_token, holder, method,
        state, state_token, state_holder, state_since)
SELECT :version_table, :revision, :resource, :token, :holder, 'upgrade',
       'rolling_back', :token, :holder, clock_timestamp()
  FROM {schema}.agent_fence f
 WHERE f.resource = :resource AND f.token = :token
ON CONFLICT (version_table, revision) DO UPDATE
   SET state = 'rolling_back', state_token = excluded.state_token,
       state_holder = excluded.state_holder, state_since = excluded.state_since
