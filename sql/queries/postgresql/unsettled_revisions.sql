-- The dirty revisions of :resource: ledger rows whose DDL started in pre-check mode and never
-- finished ('applying' or 'rolling_back'), oldest first.
SELECT version_table, revision, state, state_token, state_holder, state_since
  FROM {schema}.applied_revision
 WHERE resource = :resource AND state <> 'applied'
 ORDER BY state_since, revision
