-- Pre-check mode, before :revision's DDL: its ledger row, marked 'applying' under :token, written
-- only while the fence still holds :token (0 rows: a newer token has written, FENCED), and
-- committed before the DDL runs; write_ledger_row() settles it in the transaction that writes
-- Alembic's version row. A row still 'applying' afterwards is a dirty revision.
INSERT INTO {schema}.applied_revision
       (version_table, revision, resource, applied_token, holder, method, script_sha256, source,
        state, state_token, state_holder, state_since)
SELECT :version_table, :revision, :resource, :token, :holder, 'upgrade', :script_sha256, :source,
       'applying', :token, :holder, clock_timestamp()
  FROM {schema}.agent_fence f
 WHERE f.resource = :resource AND f.token = :token
ON CONFLICT (version_table, revision) DO UPDATE
   SET resource = excluded.resource, applied_token = excluded.applied_token, holder = excluded.holder,
       method = excluded.method, applied_at = now(), script_sha256 = excluded.script_sha256,
       source = excluded.source,
       state = 'applying', state_token = excluded.state_token, state_holder = excluded.state_holder,
       state_since = excluded.state_since
