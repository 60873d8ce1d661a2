-- The ledger of one Alembic version table, oldest first (state.py orders the rows of one
-- applied_at by the event log), with each revision's state ('applied', or 'applying' /
-- 'rolling_back' for a revision whose DDL did not finish).
SELECT revision, resource, applied_token, holder, method, applied_at, script_sha256,
       state, state_token, state_holder, state_since
  FROM {schema}_applied_revision
 WHERE version_table = :version_table
 ORDER BY applied_at, revision
