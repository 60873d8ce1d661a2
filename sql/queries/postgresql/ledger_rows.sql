-- The ledger of one Alembic version table, oldest first (state.py orders the rows of one
-- applied_at by the event log), with each revision's state ('applied', or 'applying' /
-- 'rolling_back' when pre-check mode left it dirty). state is read through
-- to_jsonb so that `fencemigrate state` also reads a fence schema still at 0.2, which has none.
SELECT revision, resource, applied_token, holder, method, applied_at, script_sha256,
       coalesce(to_jsonb(a) ->> 'state', 'applied') AS state
  FROM {schema}.applied_revision a
 WHERE version_table = :version_table
 ORDER BY applied_at, revision
