-- The ledger of one Alembic version table, oldest first.
SELECT revision, resource, applied_token, holder, method, applied_at, script_sha256
  FROM {schema}_applied_revision
 WHERE version_table = :version_table
 ORDER BY applied_at, revision
